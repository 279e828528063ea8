"""`torch.neuron`: the device module of the built-in device, shaped like `torch.cuda`.

Registered by `torchferry.device.enable()`; every function here works only after that.
This module only gathers the API from its submodules (devices, memory, random, streams,
accounting) and the compile metrics; `__all__` is the whole public namespace.
"""

from torchferry.device.compile import get_dynamo_metrics, reset_dynamo_metrics
from torchferry.device.neuron.accounting import clear_op_tracking, get_executed_ops, get_fallback_ops
from torchferry.device.neuron.devices import (
    _index,
    _is_in_bad_fork,
    current_device,
    device,
    device_count,
    get_amp_supported_dtype,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    is_neuron_runtime_initialized,
    set_device,
)
from torchferry.device.neuron.memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from torchferry.device.neuron.random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torchferry.device.neuron.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
    synchronize,
)

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "clear_op_tracking",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_dynamo_metrics",
    "get_executed_ops",
    "get_fallback_ops",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "is_neuron_runtime_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_dynamo_metrics",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


def __getattr__(name: str) -> object:  # pragma: no cover - plain attribute error with a hint
    raise AttributeError(f"torch.neuron (torchferry's built-in device) has no attribute {name!r}")
