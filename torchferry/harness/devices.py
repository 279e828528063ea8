"""Devices behind one interface: resolution, availability, synchronisation and peak memory.

The counters (ops, fallbacks, compile figures, predictions) are read by the measurement window
(harness/window.py).

Everything goes through ``torch.accelerator`` and ``torch.get_device_module(type)``. Nothing
here branches on a device name except ``BACKEND_PROVIDERS``, the data that says which package
registers a PrivateUse1 name when ``torch.device(name)`` does not know it yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import resource
import sys
from dataclasses import dataclass
from typing import Any

from torchferry.errors import DeviceUnavailableError
from torchferry.records import Record

# device type -> packages that can register it, in order of preference: a real backend
# first, then torchferry's built-in device (whose `enable()` registers PrivateUse1).
BUILTIN_PROVIDER = "torchferry.device"  # torchferry's own device package
BACKEND_PROVIDERS: dict[str, tuple[str, ...]] = {"neuron": ("torch_neuronx", BUILTIN_PROVIDER)}
# provider package -> the environment that makes its device draw from the CPU's random stream (one stream: what a
# check compares); a device without an entry draws on the host through check/streams.py instead
ONE_STREAM: dict[str, dict[str, str]] = {BUILTIN_PROVIDER: {"TORCHFERRY_RNG": "host"}}


def builtin_device_present() -> bool:
    """Whether torchferry's built-in device is built (its C++ core is importable), without importing it."""
    try:
        return importlib.util.find_spec("torchferry.device._C") is not None
    except (ImportError, ValueError):
        return False


def default_target() -> tuple[str, str]:
    """The first available of: a real neuron backend, the current accelerator, the built-in device.

    Returns (device, why). Falls back to ``cpu`` (stated in ``why``) when none exists, so that
    the default run still proves the harness end to end.
    """
    import torch

    from torchferry.device import real_neuron_installed  # not find_spec: the stand-in answers that

    if real_neuron_installed():
        return "neuron", "torch_neuronx is installed"
    if torch.accelerator.is_available():
        acc = torch.accelerator.current_accelerator()
        return acc.type, f"current accelerator is {acc.type!r}"
    if builtin_device_present():
        return "neuron", "torchferry's built-in neuron device"
    return "cpu", (
        "no accelerator, no torch_neuronx and torchferry's built-in device is not built "
        "(torchferry.device._C missing): checking cpu against cpu; pass --target to choose"
    )


def _register(device_type: str) -> None:
    """Make ``device_type`` known to torch by importing/enabling the package that provides it."""
    for name in BACKEND_PROVIDERS.get(device_type, ()):
        if importlib.util.find_spec(name.split(".")[0]) is None:
            continue
        try:
            module = importlib.import_module(name)
            if name.startswith("torchferry."):
                module.enable()  # the built-in device registers only when asked
            return
        except (ImportError, AttributeError) as exc:
            raise DeviceUnavailableError(
                f"device {device_type!r} needs {name}, which failed to load ({type(exc).__name__}: {exc}). "
                "Rebuild torchferry (pip install --no-build-isolation -e .) or choose another --target."
            ) from exc


def check_usable(name: str) -> None:
    """Fail before any worker starts when ``name`` cannot be a usable device here; registers nothing.

    The name must parse (or be a PrivateUse1 name whose package is installed), its device
    module must say it is available, and an index must be below the device count.
    """
    import torch

    device_type = name.split(":")[0]
    try:
        device = torch.device(name)
    except RuntimeError:
        providers = BACKEND_PROVIDERS.get(device_type)
        if providers is None:
            raise DeviceUnavailableError(
                f"unknown device {name!r}. Valid here: {', '.join(available_devices())} (any registered "
                "PrivateUse1 name also works). Pass one of them to --ref/--target."
            ) from None
        if importlib.util.find_spec(providers[0]) is None and not builtin_device_present():
            raise DeviceUnavailableError(
                f"device {name!r} needs {' or '.join(providers)}, and neither is available (torchferry's built-in "
                "device is not built). Build it (pip install --no-build-isolation -e .) or choose another --target."
            ) from None
        return
    if device.type in ("cpu", "meta"):
        return
    try:
        module = torch.get_device_module(device.type)
    except (RuntimeError, AttributeError):
        module = None
    available = getattr(module, "is_available", None)
    if module is None or (callable(available) and not available()):
        raise DeviceUnavailableError(
            f"device {name!r} is not available here (torch.{device.type}.is_available() is False on this machine). "
            f"Available: {', '.join(available_devices())}. Pass one of them to --ref/--target."
        )
    count = getattr(module, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        raise DeviceUnavailableError(
            f"device {name!r} does not exist: this machine has {count()} {device.type} device(s) "
            f"({device.type}:0 to {device.type}:{count() - 1}). Pass an index in that range."
        )


def resolve(name: str) -> Any:
    """``torch.device(name)``, registering its backend first when needed; usable or a clear error."""
    import torch

    device_type = name.split(":")[0]
    try:
        torch.device(name)
    except RuntimeError:  # not a type torch knows yet: a PrivateUse1 name whose package registers it
        _register(device_type)
    try:
        device = torch.device(name)
        torch.empty(1, device=device)
    except Exception as exc:
        raise DeviceUnavailableError(
            f"device {name!r} is not usable here ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
            f"Available: {', '.join(available_devices())}. Pass one of them to --ref/--target."
        ) from exc
    return device


def _registered_types() -> set[str]:
    import torch

    types = {"cpu", "meta"}
    if torch.accelerator.is_available():
        types.add(torch.accelerator.current_accelerator().type)
    backend = torch._C._get_privateuse1_backend_name()
    if backend != "privateuseone":
        types.add(backend)
    return types


def available_devices() -> list[str]:
    """Device names that would work here (for error messages)."""
    names = sorted(_registered_types() - {"meta"})
    for device_type, providers in BACKEND_PROVIDERS.items():
        if device_type not in names and (
            importlib.util.find_spec(providers[0]) is not None or builtin_device_present()
        ):
            names.append(device_type)
    return names


def synchronize(device: Any) -> None:
    """Wait for all work queued on ``device``: timings are meaningless without it."""
    import torch

    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if acc is not None and acc.type == device.type:
        torch.accelerator.synchronize(device)
        return
    module = torch.get_device_module(device.type)
    if hasattr(module, "synchronize"):
        module.synchronize()


def device_module(device: Any) -> Any:
    import torch

    return torch.get_device_module(device.type)


@dataclass(frozen=True)
class Memory(Record):
    """Peak memory in bytes, and where it was read (``torch.<type>.max_memory_allocated`` or ``host RSS``)."""

    bytes: int
    source: str


def peak_memory(device: Any) -> Memory:
    """Peak memory: the device allocator's when it reports one, else the host process RSS peak."""
    module = device_module(device)
    if hasattr(module, "max_memory_allocated"):
        try:
            return Memory(int(module.max_memory_allocated()), f"torch.{device.type}.max_memory_allocated")
        except Exception:  # a device module that declares but cannot answer: fall through to RSS
            pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return Memory(int(rss if sys.platform == "darwin" else rss * 1024), "host RSS")


def emulates(device: Any) -> str | None:
    """The device profile a device emulates on this host (its properties' ``is_host_emulation``), None for real hardware.

    An emulating device's times are the cost of the emulation on this host, never the emulated hardware's."""
    properties = getattr(device_module(device), "get_device_properties", None)
    if not callable(properties):
        return None
    props = properties(device)
    return str(getattr(props, "profile", None) or device.type) if getattr(props, "is_host_emulation", False) else None


def builtin_emulation(device: str) -> str | None:
    """What ``device`` emulates when it is to be torchferry's built-in device here (no real backend installed),
    else None. Asks the provider table and the device package's own test, registering nothing."""
    from torchferry.device import real_neuron_installed  # not find_spec: the stand-in answers that

    providers = BACKEND_PROVIDERS.get(device.split(":")[0], ())
    if BUILTIN_PROVIDER in providers and not real_neuron_installed() and builtin_device_present():
        return f"{device.split(':')[0]} (built-in emulation)"
    return None
