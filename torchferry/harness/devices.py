"""Devices behind one interface: resolution, availability, synchronisation, memory and counters.

Everything goes through ``torch.accelerator`` and ``torch.get_device_module(type)``. Nothing
here branches on a device name except ``BACKEND_PROVIDERS``, the data that says which package
registers a PrivateUse1 name when ``torch.device(name)`` does not know it yet.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import resource
import sys
from dataclasses import dataclass
from typing import Any

from torchferry.errors import DeviceUnavailableError

# device type -> packages that can register it, in order of preference: a real backend
# first, then torchferry's built-in device (whose `enable()` registers PrivateUse1).
BACKEND_PROVIDERS: dict[str, tuple[str, ...]] = {"neuron": ("torch_neuronx", "torchferry.device")}


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


def reset_peak_memory(device: Any) -> None:
    module = device_module(device)
    if hasattr(module, "reset_peak_memory_stats"):
        module.reset_peak_memory_stats()


@dataclass(frozen=True)
class Memory:
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


def op_tracking(device: Any) -> Any | None:
    """The device module if it tracks fallback/executed ops (torchferry's built-in device does)."""
    module = device_module(device)
    return module if all(hasattr(module, n) for n in ("get_fallback_ops", "get_executed_ops", "clear_op_tracking")) else None


class Counters:
    """Op and compile counters of one device, read the same way by every command's worker.

    ``reset`` before the measured work, then ``ops``/``fallback_ops``/``compile``/``peak_memory``
    after it. Devices that track nothing give empty figures, never invented ones.
    """

    def __init__(self, device: Any) -> None:
        self.device, self.module, self.tracker = device, device_module(device), op_tracking(device)

    def reset(self, compiling: bool = False) -> None:
        if self.tracker is not None:
            self.tracker.clear_op_tracking()
        reset_peak_memory(self.device)
        if compiling and hasattr(self.module, "reset_dynamo_metrics"):
            self.module.reset_dynamo_metrics()

    def fallback_ops(self) -> dict[str, int]:
        return dict(self.tracker.get_fallback_ops()) if self.tracker is not None else {}

    def ops(self) -> dict:
        """``{"fallback": op -> calls, "executed_total": calls}``, or ``{}`` when the device does not track ops."""
        if self.tracker is None:
            return {}
        return {"fallback": self.fallback_ops(), "executed_total": sum(dict(self.tracker.get_executed_ops()).values())}

    def peak_memory(self) -> dict:
        return dataclasses.asdict(peak_memory(self.device))

    def compile(self, backend: str | None) -> dict:
        """Dynamo's graph counts, plus the device backend's per-graph metrics where it reports them."""
        if not backend:
            return {}
        from torch._dynamo.utils import counters

        found: dict[str, Any] = {
            "backend": backend,
            "graphs": int(counters["stats"].get("unique_graphs", 0)),
            "recompilations": int(sum(counters["recompiles"].values())) if "recompiles" in counters else 0,
            "graph_breaks": int(sum(counters["graph_break"].values())),
        }
        metrics = getattr(self.module, "get_dynamo_metrics", None)
        if callable(metrics):  # the device's backend reports per compiled graph
            m = metrics()
            graphs = m["graphs"]
            found.update(
                compiled_graphs=len(graphs),
                compile_s=sum(g["torch_neuronx_compile_us"] for g in graphs) / 1e6,
                cache_hits=sum(g["cache"] == "hit" for g in graphs),
                cache_misses=sum(g["cache"] == "miss" for g in graphs),
                graph_break_reasons=m["graph_breaks"],
                per_graph=[{k: g[k] for k in ("graph_name", "graph_node_count", "torch_neuronx_compile_us", "cache")}
                           for g in graphs],
            )
        return found

    def graphs(self) -> int:
        """Graphs Dynamo compiled so far in this process (its ``unique_graphs`` counter)."""
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))
