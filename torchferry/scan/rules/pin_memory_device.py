"""TF015: a device named for pinned memory (`pin_memory("cuda")`, `pin_memory_device=`)."""

from collections.abc import Iterator

import ast

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import AttributeName, keyword


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "pin_memory" and (node.args or node.keywords):
        yield Hit(AttributeName(func))
    named = keyword(node, "pin_memory_device")
    if named is not None:
        yield Hit(named)


RULE = Rule(
    id="TF015",
    name="pin-memory-device",
    severity=Severity.WARNING,
    summary="Pinned memory is requested for a named device; the device argument is deprecated and CUDA-bound.",
    fix="drop the device argument: `x.pin_memory()` / `DataLoader(pin_memory=True)` pin for the current accelerator",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"pin_memory",
    tied_to_cuda=True,
)
