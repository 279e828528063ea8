"""TF001: `.cuda()` moves a tensor or module to CUDA by name."""

import ast
from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import ACCELERATOR, expr, first_arg, prepend
from torchferry.scan.syntax import AttributeName


def _to_accelerator(call: cst.Call) -> cst.Call:
    func = call.func.with_changes(attr=cst.Name("to"))
    return call.with_changes(func=func, args=prepend(first_arg(expr(ACCELERATOR)), list(call.args)))


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "cuda") or ctx.qualname(func) == "torch.cuda":
        return
    # `.cuda()` and `.cuda(non_blocking=...)` mean the current device, as does the rewrite;
    # `.cuda(i)` picks a device by number, which has no device-neutral spelling to rewrite to.
    only_non_blocking = not node.args and all(k.arg == "non_blocking" for k in node.keywords)
    yield Hit(AttributeName(func), fix=_to_accelerator if only_non_blocking else None, target=node)


RULE = Rule(
    id="TF001",
    name="cuda-method",
    severity=Severity.ERROR,
    summary="`.cuda()` moves data to a CUDA device by name; it fails on any other accelerator.",
    fix="`.to(torch.accelerator.current_accelerator())`",
    safe_fix="`.cuda()` / `.cuda(non_blocking=...)` -> `.to(torch.accelerator.current_accelerator(), ...)`; `.cuda(i)` is left alone",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"cuda",
    tied_to_cuda=True,
    picks_device=True,
)
