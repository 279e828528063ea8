"""`torch.neuron.memory`: TorchNeuron's `torch_neuronx.memory` names (its `torch.neuron` imports that
module), over the built-in device's allocator statistics."""

from torchferry.device.neuron._memory import (
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)

__all__ = [
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]
