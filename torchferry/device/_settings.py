"""Runtime knobs of the built-in device, read from the environment in one place.

| variable | meaning | default |
|---|---|---|
| `TORCHFERRY_DEVICE` | `neuron` enables the device at `import torch` (autoload) | unset |
| `NEURON_RT_VISIBLE_CORES` | cores this process sees: `0-3`, `0,2,5`, `1` | unset |
| `NEURON_RT_NUM_CORES` | number of cores when VISIBLE_CORES is unset | `LOCAL_WORLD_SIZE` under `torchrun`, else 1 |
| `TORCHFERRY_DEVICE_MEMORY` | capacity per device: `24GiB`, `512MiB`, `16GB`, bytes | profile's (24 GiB for trn2) |
| `TORCHFERRY_FALLBACK` | host-fallback ops: `warn`, `silent`, `error` | `warn` |
| `TORCHFERRY_PROFILE` | device profile: a shipped name (`trn2`) or a TOML path | `trn2` |
| `TORCHFERRY_NUMERICS` | 64-bit values of natively run ops: `target` (32-bit range and precision, as the target computes them) or `host` (exact) | the profile's (`target` for trn2) |
| `TORCHFERRY_CACHE_DIR` | torchferry's caches (compiled graphs, eager signatures) | `$XDG_CACHE_HOME/torchferry` or `~/.cache/torchferry` |
| `TORCH_NEURONX_NEFF_CACHE_DIR` | where eager op signatures (NEFF-compile accounting) persist across processes | `neff_cache` under `TORCHFERRY_CACHE_DIR` (never TorchNeuron's `/tmp/neff_cache`) |
| `TORCHFERRY_NO_MEMORY_CACHING` | `1` returns freed device memory to the host at once instead of caching it for reuse (as `PYTORCH_NO_CUDA_MEMORY_CACHING` does for CUDA) | `0` |
| `TORCHFERRY_BACKWARD_THREAD` | which thread runs a device backward: `caller` (the thread that calls it, as for the CPU) or `device` (PyTorch's autograd device thread) | `caller` |
| `TORCHFERRY_STANDIN` | `0` keeps `import torch_neuronx` from finding torchferry's stand-in | `1` |
| `TORCHFERRY_RNG` | the default generators' stream: `device` (each device its own, as every accelerator has) or `host` (the CPU's default generator itself: one stream, the same numbers in the same order as a CPU run; `ferry check` sets it in its target's processes) | `device` |

Fallback modes and their codes for the C++ core are defined here only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pathlib import Path

from torchferry.device.profile import NUMERICS_MODES
from torchferry.errors import UsageError

FALLBACK_MODES = ("warn", "silent", "error")  # index = FallbackMode in csrc/neuron.h
NEFF_CACHE_DIR_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


class DeviceSettingError(UsageError):
    """An environment variable of the built-in device has a value it cannot use."""


def visible_device_count(environ: Mapping[str, str]) -> int:
    """Number of logical NeuronCores this process sees, as the Neuron runtime counts them.

    Under `torchrun` (LOCAL_WORLD_SIZE set) with neither NEURON_RT variable set, a
    process sees one core per local rank, so that `neuron:LOCAL_RANK` exists on every
    rank; NEURON_RT_VISIBLE_CORES and NEURON_RT_NUM_CORES always win.
    """
    visible = environ.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if visible:
        return len(_parse_core_list(visible))
    num = environ.get("NEURON_RT_NUM_CORES", "").strip()
    if not num:
        local = environ.get("LOCAL_WORLD_SIZE", "").strip()
        return int(local) if local.isdigit() and int(local) > 0 else 1
    if not num.isdigit():
        raise DeviceSettingError(
            f"NEURON_RT_NUM_CORES={num!r} is not a whole number. Set it to the number of cores "
            "this process should see (e.g. NEURON_RT_NUM_CORES=2), or unset it for one core."
        )
    # 0 means "all cores" to the Neuron runtime; a host rehearsal has no fixed number, so one.
    return max(1, int(num))


def _parse_core_list(text: str) -> list[int]:
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
            raise DeviceSettingError(
                f"NEURON_RT_VISIBLE_CORES={text!r} is not a core list: {part!r} is neither a core "
                "number nor an ascending range. Valid forms: '0-3', '0,2,5', '4'."
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        cores.extend(range(first, last + 1))
    if len(set(cores)) != len(cores):
        raise DeviceSettingError(
            f"NEURON_RT_VISIBLE_CORES={text!r} names a core twice. List each core once, e.g. '0-3'."
        )
    return cores


def parse_bytes(text: str, variable: str) -> int:
    """'24GiB' -> 25769803776; plain numbers are bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise DeviceSettingError(
            f"{variable}={text!r} is not a positive memory size. Use bytes or a number with a unit "
            f"(KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. {variable}=24GiB."
        )
    return int(float(match.group(1)) * _UNITS[unit])


def device_memory(environ: Mapping[str, str], default: int) -> int:
    text = environ.get("TORCHFERRY_DEVICE_MEMORY", "").strip()
    return parse_bytes(text, "TORCHFERRY_DEVICE_MEMORY") if text else default


def device_memory_source(environ: Mapping[str, str], profile_name: str, profile_note: str) -> str:
    """Where the capacity came from, as an out-of-memory error quotes it: the variable, or the device profile."""
    text = environ.get("TORCHFERRY_DEVICE_MEMORY", "").strip()
    if text:
        return f"set by TORCHFERRY_DEVICE_MEMORY={text}"
    return f"the device profile {profile_name}'s memory_bytes: {profile_note}"


DEVICE_NAMES = ("neuron",)  # what TORCHFERRY_DEVICE may name


def requested_device(environ: Mapping[str, str]) -> str | None:
    """The device TORCHFERRY_DEVICE asks autoload to enable, None when unset; an unknown name is an error."""
    requested = environ.get("TORCHFERRY_DEVICE", "").strip().lower()
    if requested and requested not in DEVICE_NAMES:
        raise DeviceSettingError(
            f"TORCHFERRY_DEVICE={requested!r} is not a device torchferry provides. Valid values: "
            f"{', '.join(DEVICE_NAMES)}; or unset it to leave `import torch` unchanged."
        )
    return requested or None


def check_environment(environ: Mapping[str, str]) -> None:
    """Read every knob of this table once, so that a bad value is refused before anything runs (a DeviceSettingError,
    or the profile loader's UsageError, naming the variable, the value and the valid values)."""
    from torchferry.device.profile import DEFAULT_PROFILE, NUMERICS_MODES, profile_path

    requested_device(environ)
    profile_path(environ.get("TORCHFERRY_PROFILE", "").strip() or DEFAULT_PROFILE)  # found (its contents: at start)
    visible_device_count(environ)
    device_memory(environ, 1)
    fallback_mode(environ)
    numerics(environ, NUMERICS_MODES[0])
    memory_caching(environ)
    backward_thread(environ)
    standin_enabled(environ)
    random_stream(environ)


RANDOM_STREAMS = ("device", "host")


def random_stream(environ: Mapping[str, str]) -> str:
    """`device` or `host`: TORCHFERRY_RNG, the default generators' stream."""
    stream = environ.get("TORCHFERRY_RNG", "").strip().lower() or RANDOM_STREAMS[0]
    if stream not in RANDOM_STREAMS:
        raise DeviceSettingError(
            f"TORCHFERRY_RNG={stream!r} is not a random stream. Valid values: {', '.join(RANDOM_STREAMS)} (device: "
            "each device draws from its own generator; host: the device's default generator is the CPU's, one stream)."
        )
    return stream


def fallback_mode(environ: Mapping[str, str]) -> str:
    return check_fallback_mode(environ.get("TORCHFERRY_FALLBACK", "warn").strip().lower() or "warn")


def check_fallback_mode(mode: str, origin: str = "TORCHFERRY_FALLBACK") -> str:
    """The mode itself if valid; a clear error naming the valid ones otherwise."""
    if mode not in FALLBACK_MODES:
        raise DeviceSettingError(
            f"{origin}={mode!r} is not a fallback mode. Valid values: {', '.join(FALLBACK_MODES)} "
            "(warn: run on the host and warn once per op; silent: run on the host quietly; error: raise)."
        )
    return mode


def fallback_code(mode: str) -> int:
    """The C++ core's code for a fallback mode."""
    return FALLBACK_MODES.index(check_fallback_mode(mode, "fallback mode"))


def numerics(environ: Mapping[str, str], default: str) -> str:
    """`target` or `host`: TORCHFERRY_NUMERICS, else the profile's default."""
    mode = environ.get("TORCHFERRY_NUMERICS", "").strip().lower() or default
    if mode not in NUMERICS_MODES:
        raise DeviceSettingError(
            f"TORCHFERRY_NUMERICS={mode!r} is not a numerics mode. Valid values: "
            f"{', '.join(NUMERICS_MODES)} (target: ops the target runs natively give int64 and "
            "float64 results the target's 32-bit range and precision; host: 64-bit results are exact)."
        )
    return mode


def cache_root(environ: Mapping[str, str]) -> Path:
    """TORCHFERRY_CACHE_DIR, or torchferry's directory under the user cache dir."""
    if environ.get("TORCHFERRY_CACHE_DIR"):
        return Path(environ["TORCHFERRY_CACHE_DIR"]).expanduser()
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchferry"


def neff_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where eager op signatures persist: TORCH_NEURONX_NEFF_CACHE_DIR, else torchferry's cache.

    Never TorchNeuron's own default (/tmp/neff_cache): a rehearsal must not pose as, or
    mix with, the real compiler's cache.
    """
    text = environ.get(NEFF_CACHE_DIR_ENV, "").strip()
    return Path(text).expanduser() if text else cache_root(environ) / "neff_cache"


def memory_caching(environ: Mapping[str, str]) -> bool:
    """Whether freed device blocks are cached for reuse (TORCHFERRY_NO_MEMORY_CACHING unset or 0)."""
    text = environ.get("TORCHFERRY_NO_MEMORY_CACHING", "0").strip() or "0"
    if text not in ("0", "1"):
        raise DeviceSettingError(
            f"TORCHFERRY_NO_MEMORY_CACHING={text!r} is not 0 or 1. Set 1 to return freed device memory "
            "to the host at once (slower: every step then faults its pages in again), or 0 (default) "
            "to cache it."
        )
    return text == "0"


BACKWARD_THREADS = ("caller", "device")


def backward_thread(environ: Mapping[str, str]) -> str:
    """`caller` or `device`: the thread that runs the backward of device tensors."""
    text = environ.get("TORCHFERRY_BACKWARD_THREAD", "").strip().lower() or "caller"
    if text not in BACKWARD_THREADS:
        raise DeviceSettingError(
            f"TORCHFERRY_BACKWARD_THREAD={text!r} is not a backward thread. Valid values: "
            f"{', '.join(BACKWARD_THREADS)} (caller: the thread that calls backward, as for the CPU, "
            "the default; device: PyTorch's autograd thread for the device, which costs a second "
            "OpenMP team of threads)."
        )
    return text


def standin_enabled(environ: Mapping[str, str]) -> bool:
    """Whether `enable()` lets `import torch_neuronx` find torchferry's stand-in."""
    text = environ.get("TORCHFERRY_STANDIN", "1").strip().lower() or "1"
    if text not in ("0", "1"):
        raise DeviceSettingError(
            f"TORCHFERRY_STANDIN={text!r} is not 0 or 1. Set 0 to keep `import torch_neuronx` from "
            "finding torchferry's stand-in (Hugging Face libraries then keep to the CPU), or 1 (default)."
        )
    return text == "1"
