"""TF015: a device named for pinned memory (`pin_memory("cuda")`, `pin_memory_device=`)."""

from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value == "pin_memory" and node.args:
        yield Hit(func.attr)
    named = keyword(node, "pin_memory_device")
    if named is not None:
        yield Hit(named)


RULE = Rule(
    id="TF015",
    name="pin-memory-device",
    severity=Severity.WARNING,
    summary="Pinned memory is requested for a named device; the device argument is deprecated and CUDA-bound.",
    fix="drop the device argument: `x.pin_memory()` / `DataLoader(pin_memory=True)` pin for the current accelerator",
    node_types=(cst.Call,),
    check=check,
    prefilter=r"pin_memory",
)
