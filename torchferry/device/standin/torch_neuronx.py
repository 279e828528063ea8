"""torchferry's stand-in for `torch_neuronx` (AWS TorchNeuron), over the built-in device.

This is NOT AWS's torch-neuronx. `import torch_neuronx` finds it only in a process that
enabled torchferry's built-in `neuron` device while the real package is not installed
(see `torchferry.device.standin`); `torch_neuronx.__torchferry__` is True and `__file__`
lies inside torchferry. Each function is the built-in device's own (`torch.neuron`'s).

The public names are those of the real package's `torch_neuronx/__init__.py` (source
snapshot, commit 98154b8) that the host can honour: devices, synchronisation and streams,
the memory statistics, op accounting (lists of op names, as there), compile metrics and
`NeuronProfiler`; tests/device/test_neuron_contract.py checks them against the snapshot. NKI kernels
(`nki_op`, `wrap_nki`) compile for NeuronCores and have no host equivalent: asking for
them raises an AttributeError that says so. The Hugging Face libraries only need the
module to be found and imported; they then call `torch.neuron`.
"""

from __future__ import annotations

from typing import Any

import torchferry
from torchferry.device import neuron
from torchferry.device.compile import get_dynamo_metrics, reset_dynamo_metrics
from torchferry.device.neuron import _accounting
from torchferry.device.neuron._accounting import clear_op_tracking
from torchferry.device.neuron import _devices
from torchferry.device.neuron._devices import (
    current_device,
    device_count,
    is_neuron_runtime_initialized,
    set_device,
)
from torchferry.device.neuron._memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from torchferry.device.neuron._streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
    synchronize,
)
from torchferry.device.standin.profiling import NeuronProfiler

__torchferry__ = True
# A PEP 440 version that no real torch-neuronx release has: `+torchferry` marks the stand-in.
__version__ = f"{torchferry.__version__}+torchferry"



def device(device: Any) -> Any:
    """`with torch_neuronx.device(d):` makes `d` current for the block (TorchNeuron's parameter name)."""
    return _devices.device(device)


def get_device_properties(device: Any) -> Any:
    """The device's properties; TorchNeuron's `torch_neuronx` form takes the device (its `torch.neuron` one
    defaults to the current device)."""
    return _devices.get_device_properties(device)


def get_fallback_ops() -> list[str]:
    """The ops that ran on the host, as TorchNeuron returns them: a list of names (the counts are
    `torch.neuron.get_fallback_ops()`, a torchferry extension)."""
    return list(_accounting.get_fallback_ops())


def get_executed_ops() -> list[str]:
    """The ops that ran on the device: a list of names, as in TorchNeuron."""
    return list(_accounting.get_executed_ops())


_NEEDS_TRAINIUM = {
    "nki_op": "NKI kernels",
    "wrap_nki": "NKI kernels",
}


def __getattr__(name: str) -> Any:
    if name in _NEEDS_TRAINIUM:
        raise AttributeError(
            f"torch_neuronx.{name} ({_NEEDS_TRAINIUM[name]}) is not available: this is torchferry's "
            "stand-in for torch_neuronx on the host-emulated neuron device, and NKI kernels compile "
            "for NeuronCores only. Guard the NKI path (e.g. `if not getattr(torch_neuronx, "
            "'__torchferry__', False)`) and rehearse the PyTorch fallback of the kernel instead."
        )
    raise AttributeError(
        f"module 'torch_neuronx' (torchferry's stand-in for the built-in neuron device) has no "
        f"attribute {name!r}; it provides: {', '.join(__all__)}"
    )


__all__ = [
    "Event",
    "NeuronProfiler",
    "Stream",
    "StreamContext",
    "clear_op_tracking",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_device_properties",
    "get_dynamo_metrics",
    "get_executed_ops",
    "get_fallback_ops",
    "is_neuron_runtime_initialized",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "neuron",
    "reset_accumulated_memory_stats",
    "reset_dynamo_metrics",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]
