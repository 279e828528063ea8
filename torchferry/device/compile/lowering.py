"""What TorchNeuron's lowering refuses in a compiled graph, checked before Inductor compiles it.

The built-in device compiles a graph with Inductor's CPU code, which takes every graph the CPU
takes. TorchNeuron's `neuron` backend instead lowers each AOTAutograd graph (forward, backward or
inference: `neuron_dynamo_backend/backend.py` gives AOTAutograd one compiler for all three) whole
through torch-mlir's FX importer to StableHLO (`fx/fx_transform.py`, `convert_fx_to_stablehlo`) and
compiles that with neuronx-cc; any failure of that setup raises "Neuron backend NEFF execution setup
failed with unexpected error: ..." and the `torch.compile` call fails (Dynamo's
BackendCompilerFailed). So the backend checks each graph it is given for what that lowering
refuses, with TorchNeuron's message and the fix (the profile's `compiled_*` rules, each switchable):

- `compiled_higher_order_ops`: a higher-order operator the FX importer has no `_import_hop_<name>`
  for ("Higher-order operation 'cond' not implemented in the FxImporter (tried '_import_hop_cond')",
  torch-mlir's `FxImporter._import_hop`). TorchNeuron legalizes flex attention itself
  (`fx/passes/flex_attention_legalization.py`) and torch-mlir's importer imports `while_loop` and
  `auto_functionalized`; every other one is refused, in nested subgraphs too.
- `compiled_dynamic_shapes`: symbolic sizes or values in the graph (unbacked symbols from
  `capture_scalar_outputs` or data-dependent ops, with their runtime asserts). TorchNeuron's
  `DynamicShapeAnalysis` (`fx/passes/dynamic_shape_analysis.py`) refuses them before AOTAutograd when
  it finds the shape environment; otherwise torch-mlir's lowering fails on them (its CI: "failed to
  legalize operation 'torch.runtime.assert'", "'stablehlo.broadcast_in_dim' op result #0 must be
  statically shaped", `tests/pytorch_tests/specs/dynamo_spec.json`).
- `compiled_boolean_index_put`: `index_put` with a boolean index, which TorchNeuron's compile
  decomposition (`decompositions.py`, `index_put_decomposition`) takes only as a `where` (one value,
  one mask matching the indexed dims) or as one 1-D mask with one integer index; otherwise "Boolean
  index_put is not supported in torch.compile on Neuron".
- `compiled_no_outputs`: a graph with no output left once None outputs are dropped
  (`fx/passes/remove_none_outputs.py`) and in-place updates of inputs are made outputs
  (`fx/passes/functionalize_copy_inplace_result.py`): "No outputs found in the module, expected at
  least one output" (`fx/fx_transform.py`).

What stays uncertain: which torch-mlir TorchNeuron builds against is not pinned in the snapshot;
`while_loop` is taken as imported because its CI lists `while_loop_stack_output` failing and not
`while_loop`. The graph checked is the one Inductor's decompositions leave, where TorchNeuron applies
its own (`decompositions.py`), so an operator one of them decomposes away is judged by ours.
"""

from __future__ import annotations

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from torchferry.device import target

# Higher-order operators TorchNeuron's lowering takes: its own flex-attention legalization and the
# `_import_hop_*` handlers of torch-mlir's FxImporter.
LEGALIZED_HOPS = frozenset({"flex_attention", "flex_attention_backward", "while_loop", "auto_functionalized"})
_INDEX_PUTS = frozenset({torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
                         torch.ops.aten._unsafe_index_put.default, torch.ops.aten._index_put_impl_.default})
_DOCS = "docs/device/compile.md"


class LoweringError(RuntimeError):
    """A compiled graph TorchNeuron's lowering to StableHLO refuses (Dynamo raises it as BackendCompilerFailed)."""


def _refuse(message: str, rule: str, source: str, fix: str, *, setup: bool = True) -> LoweringError:
    prefix = "Neuron backend NEFF execution setup failed with unexpected error: " if setup else ""
    return LoweringError(
        f"{prefix}{message} (torch.compile(backend='neuron') on '{_profile()}', as TorchNeuron lowers it: {source}). "
        f"Next step: {fix}; a device profile with `{rule} = false` compiles it ({_DOCS}).")


def _profile() -> str:
    from torchferry.device import _runtime

    return _runtime.profile().name


def _value(arg: object) -> object:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def check_graph(gm: torch.fx.GraphModule) -> None:
    """Raise what TorchNeuron's lowering raises for this AOTAutograd graph, in the order it meets them."""
    _check_boolean_index_put(gm)
    _check_symbols(gm)
    _check_higher_order_ops(gm)
    _check_outputs(gm)


def _check_higher_order_ops(gm: torch.fx.GraphModule) -> None:
    if not target.rule_on("compiled_higher_order_ops"):
        return
    for module in gm.modules():  # subgraphs (cond branches, loop bodies) are imported too
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
                continue
            name = node.target.name()
            if name in LEGALIZED_HOPS:
                continue
            raise _refuse(
                f"Higher-order operation '{name}' not implemented in the FxImporter (tried '_import_hop_{name}')",
                "compiled_higher_order_ops",
                "neuron_dynamo_backend/fx/fx_transform.py imports the graph with torch-mlir's FxImporter, which has "
                "no handler for it; TorchNeuron's CI lists cond, map_impl, invoke_subgraph, auto_functionalized_v2, "
                "invoke_quant_packed, while_loop_stack_output and run_and_save_rng_state failing this way, "
                "tests/pytorch_tests/specs/dynamo_spec.json",
                "compute both branches and select with torch.where instead of torch.cond, unroll a map or scan "
                "into a Python loop over a fixed count, drop torch.compiler.nested_compile_region, and let custom "
                "ops that mutate their inputs return new tensors instead")


def _check_symbols(gm: torch.fx.GraphModule) -> None:
    if not target.rule_on("compiled_dynamic_shapes"):
        return
    symbols: set = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
                symbols |= free_symbols(item)
    if not symbols:
        return
    names = sorted(map(str, symbols))
    raise _refuse(
        f"the graph has symbolic sizes or values ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}), "
        "which TorchNeuron's lowering to StableHLO cannot take",
        "compiled_dynamic_shapes",
        "neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py, 'Dynamic shapes detected in the model, but "
        "torch-neuronx requires static shapes'; where that pass does not see them, torch-mlir fails: \"failed to "
        "legalize operation 'torch.runtime.assert'\", \"'stablehlo.broadcast_in_dim' op result #0 must be "
        "statically shaped\", tests/pytorch_tests/specs/dynamo_spec.json",
        "keep data-dependent sizes and values out of the compiled region (leave "
        "torch._dynamo.config.capture_scalar_outputs and capture_dynamic_output_shape_ops off, so Dynamo breaks "
        "the graph there), or give them a static bound: pad to a fixed size and mask")


def _check_boolean_index_put(gm: torch.fx.GraphModule) -> None:
    if not target.rule_on("compiled_boolean_index_put"):
        return
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _INDEX_PUTS:
            continue
        x, indices, values, *rest = node.args
        accumulate = bool(rest[0]) if rest else bool(node.kwargs.get("accumulate", False))
        x, values, indices = _value(x), _value(values), [_value(i) for i in indices]
        if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            continue
        if _decomposes_boolean_index_put(x, indices, values, accumulate):
            continue
        raise _refuse(
            "Boolean index_put is not supported in torch.compile on Neuron. Boolean indices require nonzero() "
            "which produces dynamic shapes.",
            "compiled_boolean_index_put",
            "neuron_dynamo_backend/decompositions.py, index_put_decomposition (the compile decomposition table): "
            "a boolean index is taken only as a where (one value, one mask matching the indexed dims) or as one "
            "1-D mask with one integer index",
            "write x = torch.where(mask, value, x) (a mask of x's shape, or broadcastable to it), or assign one "
            "value: x[mask] = v with v a scalar or a one-element tensor", setup=False)


def _decomposes_boolean_index_put(x: torch.Tensor, indices: list, values: torch.Tensor, accumulate: bool) -> bool:
    """Whether TorchNeuron's index_put decomposition takes these boolean indices without raising."""
    if not isinstance(values, torch.Tensor) or values.numel() != 1:
        return False
    if not accumulate:  # try_get_where_mask: one boolean mask, None elsewhere, its shape the indexed dims'
        dim, masks, where = 0, 0, True
        for index in indices:
            if index is None:
                dim += 1
            elif isinstance(index, torch.Tensor) and index.dtype == torch.bool:
                masks += 1
                where = where and tuple(index.shape) == tuple(x.shape[dim:dim + index.ndim])
                dim += index.ndim
            else:
                where = False
        if where and masks == 1:
            return True
    flat = [i for i in indices if isinstance(i, torch.Tensor)]
    return (any(i.dtype == torch.bool and i.dim() == 1 for i in flat)
            and any(i.dtype in (torch.int32, torch.int64) for i in flat))


def _check_outputs(gm: torch.fx.GraphModule) -> None:
    if not target.rule_on("compiled_no_outputs"):
        return
    (output,) = gm.graph.find_nodes(op="output")
    results = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    if any(r is not None for r in results):
        return
    written = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
               and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"]
    if written:
        return  # TorchNeuron makes each in-place update of an input an output of the graph
    raise _refuse(
        "No outputs found in the module, expected at least one output, modify your code to have at least one "
        "output.", "compiled_no_outputs",
        "neuron_dynamo_backend/fx/fx_transform.py, convert_fx_to_stablehlo, after None outputs are dropped "
        "(fx/passes/remove_none_outputs.py); Dynamo hands the backend such a graph when the compiled code computes "
        "tensors it never returns or keeps",
        "return a tensor the compiled code computes, or leave the code that only computes Python values or "
        "discarded tensors out of torch.compile")
