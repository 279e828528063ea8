"""`torch.compile` on the built-in device, with TorchNeuron's `neuron` backend contract.

One module per job:

- `backend`: the TorchDynamo backend `neuron` (the `torch_dynamo_backends` entry point) and
  its registration;
- `contract`: TorchNeuron's rules (static shapes only, mode `default` only);
- `lowering`: what TorchNeuron's lowering to StableHLO refuses (higher-order operators, symbolic
  sizes, boolean index_put, graphs with no output), the profile's `compiled_*` rules;
- `host_graph`: device graphs lowered as host graphs, and Inductor's CPU code run on
  zero-copy host views of device tensors;
- `metrics`: `torch.neuron.get_dynamo_metrics()` (TorchNeuron's records) and
  `compile_metrics()` (torchferry's fuller view: cache, signatures, breaks, recompiles);
- `cache`: the persistent cache of compiled graphs;
- `selection`: `torch.compile(model)` with no backend picks `neuron` for graphs on the device;
- `fallbacks`, `known_issues`, `numerics`: the eager device's predicted host fallbacks, the vendor's
  known issues and target numerics, applied inside compiled graphs.
"""

from torchferry.device.compile.backend import BACKEND_NAME, neuron_backend, register
from torchferry.device.compile.contract import DynamicShapesError, UnsupportedGraphError
from torchferry.device.compile.metrics import (
    NeuronCompilationMetrics,
    compile_metrics,
    get_dynamo_metrics,
    reset_dynamo_metrics,
)

__all__ = [
    "BACKEND_NAME",
    "DynamicShapesError",
    "NeuronCompilationMetrics",
    "UnsupportedGraphError",
    "compile_metrics",
    "get_dynamo_metrics",
    "neuron_backend",
    "register",
    "reset_dynamo_metrics",
]
