"""`torch.neuron`: the device module of the built-in device, with TorchNeuron's names.

Registered by `torchferry.device.enable()`; every function here works only after that.
The public names are those of TorchNeuron's `torch.neuron` (`torch_neuronx/neuron.py` at the
snapshot in docs/device/fidelity.md, checked by tests/device/test_neuron_contract.py against
the generated `torchferry/device/profiles/trn2_neuron_contract.json`), and nothing else: code
that calls a name TorchNeuron lacks fails here as it would on Trainium. The implementation
lives in private modules (`_devices`, `_memory`, `_random`, `_streams`, `_accounting`) so
that none of them shows as an attribute; `memory` is TorchNeuron's own submodule name.

Two torchferry extensions remain, listed in the contract test with their reasons: op
accounting (`get_executed_ops`, `get_fallback_ops`, `clear_op_tracking`, which TorchNeuron
offers on `torch_neuronx`), read by the harness through the registered device module.
"""

from torchferry.device.compile import get_dynamo_metrics, reset_dynamo_metrics
from torchferry.device.neuron import memory
from torchferry.device.neuron._accounting import clear_op_tracking, get_executed_ops, get_fallback_ops
from torchferry.device.neuron._devices import (
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
from torchferry.device.neuron._random import (
    get_rng_state,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
)
from torchferry.device.neuron._streams import (
    current_stream,
    default_stream,
    query,
    record_event,
    set_stream,
    stream,
    synchronize,
    wait_event,
    wait_stream,
)
from torchferry.device.neuron._streams import new_event as Event  # noqa: N812 (TorchNeuron's name)
from torchferry.device.neuron._streams import new_stream as Stream  # noqa: N812

__all__ = [
    "Event",
    "Stream",
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
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "query",
    "record_event",
    "reset_accumulated_memory_stats",
    "reset_dynamo_metrics",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_stream",
    "stream",
    "synchronize",
    "wait_event",
    "wait_stream",
]


def __getattr__(name: str) -> object:  # pragma: no cover - plain attribute error with a hint
    raise AttributeError(f"torch.neuron (torchferry's built-in device) has no attribute {name!r}: TorchNeuron's "
                         "torch.neuron has no such name either")
