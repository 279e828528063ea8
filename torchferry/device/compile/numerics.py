"""Target numerics inside compiled graphs: 64-bit values at the target's 32 bits.

Under `TORCHFERRY_NUMERICS=target` the eager device rounds the 64-bit inputs and results of
every op TorchNeuron compiles (int64 wraps as int32, float64 rounds to float32; the dtype
stays 64-bit, as TorchNeuron casts results back: docs/device/fidelity.md). TorchNeuron's
`torch.compile` backend goes further for float64: it converts the whole StableHLO module it
lowers a graph to from f64 to f32, constants, arguments and every op
(`neuron_dynamo_backend/fx/fx_transform.py`, `dtype_conversion_pass`), and casts the outputs back
(`cast_spec`). So before Inductor sees an ATen graph (forward or backward), each op the target
compiles gets the eager device's round trips around it, and, under the profile's
`compiled_float64` rule, every other non-view op its float64 ones too; an op with a float64
operand takes its float scalar arguments at their float32 value, as TorchNeuron passes them
(processors/argument_processor.py; the module conversion rounds constants the same way).
Inductor fuses the round trips into its kernels. int64 follows the eager rule: the module
conversion leaves integer types alone.
"""

from __future__ import annotations

import torch
import torch.fx

from torchferry.device import target

_NARROW = {torch.int64: torch.int32, torch.float64: torch.float32}


def full_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def is_view(op: torch._ops.OpOverload) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def _wide(node: object) -> torch.dtype | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) and value.dtype in _NARROW else None


def as_float32(value: float) -> float:
    """`value` rounded to the nearest float32 (inf beyond its range), as a Python float."""
    return torch.tensor(value, dtype=torch.float32).item()


def narrow_64bit(gm: torch.fx.GraphModule) -> int:
    """Round the 64-bit inputs and results of the target's compiled ops in `gm` (in place);
    returns how many ops were wrapped (0 under host numerics: the graph is unchanged)."""
    convert = torch.ops.prims.convert_element_type.default
    whole_float64 = target.numerics() == "target" and target.rule_on("compiled_float64")
    graph, wrapped = gm.graph, 0
    rounded: dict[torch.fx.Node, torch.fx.Node] = {}

    def round_trip(node: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
        narrow = graph.call_function(convert, (node, _NARROW[dtype]))
        back = graph.call_function(convert, (narrow, dtype))
        for n, like in ((narrow, node), (back, node)):
            n.meta["val"] = like.meta["val"].to(_NARROW[dtype] if n is narrow else dtype)
        return back

    for node in list(graph.nodes):
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op is convert:
            continue
        if is_view(op):
            continue
        wide = set(_NARROW) if target.narrows_64bit(full_name(op)) else {torch.float64} if whole_float64 else set()
        inputs = [a for a in node.all_input_nodes if _wide(a) in wide]
        dtype = _wide(node) if _wide(node) in wide else None
        if not inputs and dtype is None:
            continue
        wrapped += 1
        if any(_wide(a) == torch.float64 for a in inputs):
            node.args = tuple(as_float32(a) if type(a) is float else a for a in node.args)
            node.kwargs = {k: as_float32(v) if type(v) is float else v for k, v in node.kwargs.items()}
        for arg in inputs:
            if arg not in rounded:
                with graph.inserting_before(node):  # before its first rounding consumer
                    rounded[arg] = round_trip(arg, _wide(arg))
            if rounded[arg] is not arg:
                node.replace_input_with(arg, rounded[arg])
        if dtype is not None:
            with graph.inserting_before(node.next):
                result = round_trip(node, dtype)
            node.replace_all_uses_with(result, delete_user_cb=lambda user: user is not result.args[0])
            rounded[node] = rounded[result] = result
    if wrapped:
        graph.lint()
        gm.recompile()
    return wrapped
