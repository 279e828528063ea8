"""TF005: `torch.cuda.amp.GradScaler` scales CUDA gradients only (and is deprecated)."""

import ast
from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import DEVICE_TYPE, expr, first_arg, prepend

NAMES = {"torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"}


def _to_amp(call: cst.Call) -> cst.Call:
    # torch.amp.GradScaler(device, init_scale, ...) = the CUDA one's parameters shifted by one.
    return call.with_changes(func=expr("torch.amp.GradScaler"),
                             args=prepend(first_arg(expr(DEVICE_TYPE)), list(call.args)))


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    if not ctx.is_outermost(node) or ctx.qualname(node) not in NAMES:
        return
    call = ctx.called(node)
    yield Hit(node, fix=_to_amp if call is not None else None, target=call)


RULE = Rule(
    id="TF005",
    name="cuda-grad-scaler",
    severity=Severity.WARNING,
    summary="`torch.cuda.amp.GradScaler` is disabled off CUDA, so float16 gradients underflow silently.",
    fix="`torch.amp.GradScaler(torch.accelerator.current_accelerator().type, ...)`",
    safe_fix="`torch.cuda.amp.GradScaler(args)` -> `torch.amp.GradScaler(<current accelerator type>, args)`",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to(*NAMES),
    tied_to_cuda=True,
)
