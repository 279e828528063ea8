"""TF004: `torch.cuda.amp.autocast` autocasts on CUDA only (and is deprecated)."""

import ast
from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import has_unpacking, refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import DEVICE_TYPE, expr, first_arg, positional_to_keywords, prepend

# torch.cuda.amp.autocast(enabled, dtype, cache_enabled): positionals become keywords, because
# torch.amp.autocast takes (device_type, dtype, enabled, ...) in a different order.
_PARAMETERS = ("enabled", "dtype", "cache_enabled")
NAME = "torch.cuda.amp.autocast"


def _to_amp(call: cst.Call) -> cst.Call:
    args = positional_to_keywords(call, _PARAMETERS)
    return call.with_changes(func=expr("torch.amp.autocast"),
                             args=prepend(first_arg(expr(DEVICE_TYPE), "device_type"), args))


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    if not ctx.is_outermost(node) or ctx.qualname(node) != NAME:
        return
    call = ctx.called(node)
    if call is None or has_unpacking(call) or len(call.args) > len(_PARAMETERS):  # no keyword for every argument
        yield Hit(node)
    else:
        yield Hit(node, fix=_to_amp, target=call)


RULE = Rule(
    id="TF004",
    name="cuda-autocast",
    severity=Severity.WARNING,
    summary="`torch.cuda.amp.autocast` autocasts CUDA ops only; on another accelerator the model runs in full precision.",
    fix="`torch.amp.autocast(device_type=torch.accelerator.current_accelerator().type, ...)`",
    safe_fix="`torch.cuda.amp.autocast(args)` -> `torch.amp.autocast(device_type=<current accelerator type>, args as keywords)`",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to(NAME),
    tied_to_cuda=True,
)
