"""TF020: ops whose output shape depends on the data, in a forward or a training step.

Which ops, and whether the target runs each on the host or on the device with a host read
of its output size: the built-in device's profile (`host_ops`), so the scan and the
rehearsal name the same ops the same way. Indexing with a boolean mask (`t[mask]`, and
`t[mask] = tensor`) runs `nonzero` on TorchNeuron; `t[mask] = scalar` becomes a masked_fill
there and is not reported. Nothing is reported in data loading, where it costs nothing.
"""

from collections.abc import Iterator

import ast

from torchferry.scan.host_ops import HostOp, boolean_index_op, matching_call
from torchferry.scan.regions import REGION_WORDS
from torchferry.report.scan import Hit, Rule, Severity


def _message(written: str, region: str, op: HostOp) -> str:
    return (f"`{written}` in a {region}: {op.entry.reason}; {op.effect()}, and torch.compile breaks the graph "
            f"[{op.cite()}].")


def _stores_scalar(node: ast.Subscript, ctx) -> bool:
    """`t[mask] = v` with `v` not a tensor (a masked_fill); `t[mask] += v` reads too, so it is no store."""
    assign = ctx.parent(node)
    if not (isinstance(assign, ast.Assign) and any(t is node for t in assign.targets)):
        return False
    return not ctx.tensors.is_tensor(assign.value)


def _indices(node: ast.Subscript, ctx) -> list[ast.AST]:
    """What `t[a, b]` is indexed with, one value per comma (`t[(a, b)]` is one tuple), slices left out."""
    index = node.slice
    if isinstance(index, ast.Tuple) and not ctx.parenthesized(index):
        return [e for e in index.elts if not isinstance(e, ast.Slice)]
    return [] if isinstance(index, ast.Slice) else [index]


def check(node: ast.Call | ast.Subscript, ctx) -> Iterator[Hit]:
    if isinstance(node, ast.Call):
        found = matching_call(node, ctx)
        if found is None:
            return
        region = ctx.regions.region(node)
        if region is not None:
            yield Hit(node.func, message=_message(found[1], region, found[0]))
        return
    masked = any(ctx.tensors.is_bool_mask(index) for index in _indices(node, ctx))
    if not masked or _stores_scalar(node, ctx):
        return
    region = ctx.regions.region(node)
    op = boolean_index_op() if region is not None else None  # the profile is loaded only when needed
    if op is not None:
        yield Hit(node, message=_message("t[mask]", region, op))


RULE = Rule(
    id="TF020",
    name="data-dependent-shape",
    severity=Severity.WARNING,
    summary="An op whose output shape depends on the data (boolean-mask indexing, nonzero, masked_select, "
    "unique, ...) runs in a forward or training step; TorchNeuron runs it on the host, or reads its size there.",
    fix="keep shapes static: `torch.where(mask, x, 0)` / `x.masked_fill(~mask, 0)` with a masked reduction, "
    "`torch.nonzero_static(x, size=k)`, or move the op into data loading",
    node_types=(ast.Call, ast.Subscript),
    check=check,
    prefilter=REGION_WORDS,
)
