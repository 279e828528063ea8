"""Predicted host fallbacks inside compiled graphs: the ops TorchNeuron does not implement
still count when they run in a `torch.compile(backend="neuron")` graph.

What TorchNeuron's compiler does with such an op (torch-neuronx snapshot, see
docs/device/fidelity.md): `neuron_dynamo_backend/backend.py` lowers the whole AOTAutograd
graph to StableHLO (`_compile_fx_to_stablehlo`, torch-mlir's FX importer) and compiles it
with neuronx-cc as one program; it has no graph partitioning and no per-op CPU fallback.
An op that cannot be lowered makes that setup raise ("Neuron backend NEFF execution setup
failed with unexpected error"); a graph whose execution fails runs the original
GraphModule eagerly instead (`execution_wrapper`, unless
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION is set), where every op takes the eager path and
those TorchNeuron does not implement run on the CPU. Which ATen ops torch-mlir can lower is
not in the snapshot, so the eager table is the prediction: each call of a compiled graph
counts its ATen ops that the profile runs on the host, as the eager device would, in
`torch.neuron.get_fallback_ops()`, with the same warning once per op.

Only `aten` operators are judged: the graph Inductor compiles also holds `prims` that
Inductor's own decompositions introduce (its random-number prims for dropout, dtype
conversions), which TorchNeuron's decompositions (neuron_dynamo_backend/decompositions.py,
fx/passes/random_op_legalization.py) replace with their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.fx

from torchferry.device import target
from torchferry.device.compile.numerics import full_name, is_view


def aten_calls(gm: torch.fx.GraphModule) -> Iterator[tuple[torch.fx.Node, str]]:
    """The graph's calls of ATen ops that are not views, with each op's full name: the calls
    the eager device would judge one by one."""
    for node in gm.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue
        if op.namespace != "aten" or is_view(op):
            continue
        yield node, full_name(op)


def host_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The ATen ops of `gm` the profile runs on the host, one entry per call in the graph."""
    return [name for _, name in aten_calls(gm) if target.runs_on_host(name)]
