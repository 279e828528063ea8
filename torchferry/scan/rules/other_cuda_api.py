"""TF018: any other `torch.cuda` use, so nothing CUDA-bound slips past the specific rules."""

from collections.abc import Iterator

import ast

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rules import amp_autocast, device_api, events_streams, grad_scaler, memory_api

CLAIMED = (set(device_api.RENAMES) | set(events_streams.EQUIVALENTS) | memory_api.NAMES | grad_scaler.NAMES
           | {amp_autocast.NAME})


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if not name or not (name == "torch.cuda" or name.startswith("torch.cuda.")):
        return
    if name in CLAIMED or name.startswith("torch.cuda.memory."):
        return
    yield Hit(node, message=f"`{name}` is CUDA-only.")


RULE = Rule(
    id="TF018",
    name="other-cuda-api",
    severity=Severity.WARNING,
    summary="Another `torch.cuda` API is used; it exists for CUDA only.",
    fix="the same call on `torch.get_device_module(torch.accelerator.current_accelerator())`, "
    "or its `torch.accelerator` / `torch.amp` equivalent",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to("torch.cuda"),
    tied_to_cuda=True,
)
