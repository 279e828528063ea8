"""Whether a model named by the user fits this machine, said before anything is built.

`ferry check -w MODEL` builds the named model at full size in float32 on the reference (this host) and on
the target; a 7B config on a 23 GiB host used to fail minutes later as a failed allocation inside the
workload's build, filed as the workload's error. Here, before any worker starts, the model's need on each
side comes from `ferry plan`'s own estimate (torchferry.workloads.footprint.trace: one step traced on
FakeTensor at world 1, with the run's batch and sequence, float32, AdamW; for forward and generate, the
weights of the same meta-device build) and is compared with the target's capacity per device and with this
host's available memory. A model that does not fit is refused with the numbers and the fixes (a smaller
size, a smaller config, ``ferry plan`` for the full-scale job), exit 6; it is shrunk only when the user
asks for a size (``shrink``).

What each side holds, in units of the estimate (``X``: the step's peak in train, the weights otherwise;
``W``: the weights; ``G``: a copy of the gradients, ``W`` in train and nothing otherwise), as `ferry check`'s
workers hold them (torchferry/check/worker.py, parity.py, torchferry/harness/case.py):

- the target device: ``X`` per rank (DDP keeps a whole replica on every device);
- the reference, on this host: the pristine weights ``W``; the timed run's ``X`` (kept live for the
  steady-state rounds) and the determinism run's ``X`` (its optimizer outlives it), each with its
  captured gradients ``G``; the float64 golden run's ``2X`` and ``2G`` (eight bytes a value, not four);
- each target process, on this host: the pristine weights ``W`` and the captured gradients ``G``, and ``X``
  when the target's memory is this host's (the built-in device).

Measured (a 58M-parameter Llama, ``--steps 2``, cpu -> neuron, 2 cores): predicted 5.2 GiB for the
reference and 1.5 GiB for the target process; their peak resident sets were 5.2 and 2.2 GiB, each with
about 0.5 GiB of imported libraries, which the estimate leaves out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from torchferry.errors import DeviceOutOfMemoryError
from torchferry.workloads.footprint.model import SIZE_KEYS, ModelSpec
from torchferry.workloads.model_source import ModelSource

GIB = 2**30
HUB_MODULE = "torchferry.workloads.hub"  # a named model's build (torchferry.workloads.protocol._model_source)
TRAIN = "train"


@dataclass(frozen=True)
class Capacity:
    """Memory per device of a target, whether it is this host's memory, and where the figure was read."""

    bytes: int
    host_memory: bool
    source: str


@dataclass(frozen=True)
class Need:
    """What one run of a model holds: on each target device, and on this host (every process together)."""

    model: str
    what: str  # "a training step" | "its weights"
    weight_bytes: int
    device_bytes: int
    host_bytes: int
    breakdown: dict[str, int]  # the estimate's categories (the trace's, or the weights alone)


def amount(value: int) -> str:
    """Bytes as the message reads them: GiB from one GiB up, MiB below."""
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 2**20:.0f} MiB"


def host_available(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The memory this host can still give (MemAvailable; lower under a cgroup limit), and where it was read."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "/proc/meminfo MemAvailable"))
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            found.append((int(limit) - used, "the cgroup's memory.max less memory.current"))
    except (OSError, ValueError):
        pass
    if not found:
        found.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "sysconf free pages"))
    return min(found)


def target_capacity(name: str, environ: Mapping[str, str] | None = None) -> Capacity | None:
    """The memory per device of target ``name``: its device module's figure where torch knows the type in this
    process; for a PrivateUse1 name only the workers register (the built-in device, or TorchNeuron's), the device
    profile's, as the device itself and `ferry plan` read it. None for the CPU (this host's memory)."""
    import torch

    environ = os.environ if environ is None else environ
    device_type = name.split(":")[0]
    if device_type == "cpu":
        return None
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is not None:
        props = torch.get_device_module(device.type).get_device_properties(device.index or 0)
        return Capacity(int(props.total_memory), bool(getattr(props, "is_host_emulation", False)),
                        f"torch.{device.type}.get_device_properties")
    import torchferry.device
    from torchferry.device import _settings
    from torchferry.device.profile import load_profile

    profile = load_profile(environ.get("TORCHFERRY_PROFILE") or "trn2")
    source = _settings.device_memory_source(environ, profile.name, "")
    return Capacity(_settings.device_memory(environ, profile.memory_bytes), not torchferry.device.real_neuron_installed(),
                    source.split(":")[0].removeprefix("set by "))


def shrink_overrides(model: ModelSpec, size: str) -> dict[str, Any]:
    """The config keys (its own names) that make ``model`` a built-in ``size`` (torchferry.workloads.tokens.SIZES):
    widths, depth, heads and vocabulary; everything else, the architecture, as configured."""
    from transformers import CONFIG_MAPPING

    from torchferry.workloads.tokens import SIZES

    hidden, layers, heads, kv_heads, inter, vocab = SIZES[size]
    wanted = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "intermediate_size": inter, "vocab_size": vocab, "head_dim": hidden // heads}
    model_type = model.config.get("model_type")
    aliases = getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) if model_type in CONFIG_MAPPING else {}
    return {aliases.get(key, key): wanted[key] for key in SIZE_KEYS if aliases.get(key, key) in model.config
            or key in ("hidden_size", "num_hidden_layers", "vocab_size")}


def estimate(model: ModelSpec, mode: str, batch_size: int, seq_len: int, ranks: int, capacity: Capacity | None) -> Need:
    """The need of one `ferry check` run of ``model`` (see the module's docstring for what each side holds)."""
    import torch

    from torchferry.report.plan import Layout
    from torchferry.workloads.footprint.model import build
    from torchferry.workloads.footprint.trace import check_traceable, trace_step

    check_traceable(model)
    with torch.device("meta"):
        weights = sum(p.numel() * p.element_size() for p in build(model, {})[0].parameters())
    if mode == TRAIN:
        layout = Layout(world=1, fsdp=1, tp=1, checkpointing="off", micro_batch=batch_size, seq_len=seq_len,
                        precision="fp32", optimizer="adamw")
        trace = trace_step(model, layout)
        step, breakdown, what = trace.peak_bytes, trace.breakdown, "a training step"
    else:
        step, breakdown, what = weights, {"parameters": weights}, "its weights"
    grads = weights if mode == TRAIN else 0
    on_host = capacity is None or capacity.host_memory
    host = (weights + 4 * step + 4 * grads) + ranks * (weights + grads + (step if on_host else 0))
    return Need(model=model.name, what=what, weight_bytes=weights, device_bytes=step, host_bytes=host, breakdown=breakdown)


class Run(Protocol):
    """What the size check reads of a `ferry check` run (torchferry.check.sources.WorkloadSource, a frozen dataclass)."""

    spec: str  # as given to -w
    resolved: dict  # where its build() lives (torchferry.workloads.protocol.resolve_source)
    mode: str
    batch_size: int | None
    seq_len: int | None
    nproc: int


R = TypeVar("R", bound=Run)


def fit_named_model(run: R, target: str, size: str | None = None) -> R:
    """``run`` unchanged when its model fits this machine (or is not a model by name: a built-in or a user's
    ``build()`` sizes itself), with its model shrunk to ``size`` when the user asked for one; a
    ``DeviceOutOfMemoryError`` (exit 6) naming both sides' need and capacity, and the fixes, otherwise."""
    source, spec = run.resolved, run.spec
    if source.get("module") != HUB_MODULE:
        return run
    from torchferry.workloads.hub import BATCH, SEQ

    model = ModelSpec.of_source(ModelSource.from_dict(source["bind"]["model_source"]))
    if size is not None:
        overrides = shrink_overrides(model, size)
        model = replace(model, config={**model.config, **overrides}, name=f"{model.name} shrunk to --size {size}")
        run = replace(run, resolved={**source, "bind": {**source["bind"], "overrides": overrides}})
    capacity = target_capacity(target)
    need = estimate(model, str(run.mode), run.batch_size or BATCH, run.seq_len or SEQ, run.nproc, capacity)
    available, where = host_available()
    over = []
    if capacity is not None and need.device_bytes > capacity.bytes:
        over.append(f"{need.what} needs {amount(need.device_bytes)} on each {target} device, over its "
                    f"{amount(capacity.bytes)} ({capacity.source})")
    if need.host_bytes > available:
        over.append(f"this host would hold {amount(need.host_bytes)} (the reference's copies and the target's "
                    f"processes), over the {amount(available)} it has available ({where})")
    if over:
        parts = ", ".join(f"{k} {amount(v)}" for k, v in need.breakdown.items() if v >= 2**20)
        raise DeviceOutOfMemoryError(
            f"model {spec!r} does not fit, so nothing was built: {'; and '.join(over)}. Estimate: ferry plan's trace of "
            f"{need.what} in float32 ({parts}). Check a smaller model: --size tiny, small or base shrinks this one to "
            f"a built-in size (its architecture kept), or name a smaller config; size the full-scale job without "
            f"building it with `ferry plan -w {spec}`.")
    return run
