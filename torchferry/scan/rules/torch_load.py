"""TF017: `torch.load` without `map_location` restores tensors onto the device they were saved from."""

import ast
from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import has_unpacking, keyword, positional, refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import with_trailing_comma


def _add_map_location(call: cst.Call) -> cst.Call:
    new = cst.Arg(value=cst.SimpleString('"cpu"'), keyword=cst.Name("map_location"),
                  equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    return call.with_changes(args=with_trailing_comma([*call.args, new]))


def _feeds_load_state_dict(call: ast.Call, ctx) -> bool:
    """`m.load_state_dict(torch.load(f))` copies into m's own tensors, so where they load does not matter."""
    value, outer = call, ctx.parent(call)
    if isinstance(outer, (ast.Starred, ast.keyword)):
        value, outer = outer, ctx.parent(outer)
    passed = isinstance(value, ast.keyword) or (isinstance(outer, ast.Call) and value in outer.args)
    return (passed and isinstance(outer, ast.Call) and isinstance(outer.func, ast.Attribute)
            and outer.func.attr == "load_state_dict")


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.load" or keyword(node, "map_location") is not None:
        return
    if len(positional(node)) > 1 or has_unpacking(node):
        return  # map_location given positionally, or hidden in *args/**kwargs
    yield Hit(node.func, fix=_add_map_location if _feeds_load_state_dict(node, ctx) else None, target=node)


RULE = Rule(
    id="TF017",
    name="load-without-map-location",
    severity=Severity.WARNING,
    summary="`torch.load` without `map_location` puts CUDA-saved tensors back on CUDA, which fails elsewhere.",
    fix='`torch.load(f, map_location="cpu")`, then move to `torch.accelerator.current_accelerator()`',
    safe_fix='adds `map_location="cpu"` only inside `.load_state_dict(torch.load(f))`, which copies into the '
    "model's own tensors wherever they live",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"load",
    gate=refers_to("torch.load"),
    tied_to_cuda=True,
)
