"""torchferry's stand-in for `torch_neuronx` (AWS TorchNeuron), over the built-in device.

This is NOT AWS's torch-neuronx. `import torch_neuronx` finds it only in a process that
enabled torchferry's built-in `neuron` device while the real package is not installed
(see `torchferry.device.standin`); `torch_neuronx.__torchferry__` is True and `__file__`
lies inside torchferry. Each function is the built-in device's own (`torch.neuron`'s).

The public names are those of the real package's `torch_neuronx/__init__.py` (source
snapshot, commit 98154b8) that the host can honour: devices, synchronisation and streams,
the memory statistics, op accounting, compile metrics and `NeuronProfiler`. NKI kernels
(`nki_op`, `wrap_nki`) compile for NeuronCores and have no host equivalent: asking for
them raises an AttributeError that says so. The Hugging Face libraries only need the
module to be found and imported; they then call `torch.neuron`.
"""

from __future__ import annotations

from typing import Any

import torchferry
from torchferry.device import neuron
from torchferry.device.neuron import (
    Event,
    Stream,
    StreamContext,
    clear_op_tracking,
    current_device,
    current_stream,
    default_stream,
    device,
    device_count,
    empty_cache,
    get_device_properties,
    get_dynamo_metrics,
    get_executed_ops,
    get_fallback_ops,
    is_neuron_runtime_initialized,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_dynamo_metrics,
    reset_peak_memory_stats,
    set_device,
    set_stream,
    stream,
    synchronize,
)
from torchferry.device.standin.profiling import NeuronProfiler

__torchferry__ = True
# A PEP 440 version that no real torch-neuronx release has: `+torchferry` marks the stand-in.
__version__ = f"{torchferry.__version__}+torchferry"

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
