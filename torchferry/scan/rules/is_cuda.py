"""TF014: `.is_cuda` asks "is this on CUDA?" when the code means "is this on the accelerator?"."""

from collections.abc import Iterator

import ast

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import AttributeName


def check(node: ast.Attribute, ctx) -> Iterator[Hit]:
    if node.attr == "is_cuda":
        yield Hit(AttributeName(node))


RULE = Rule(
    id="TF014",
    name="is-cuda",
    severity=Severity.WARNING,
    summary="`.is_cuda` is False on every other accelerator, so the code takes its CPU path there.",
    fix="`x.device.type == torch.accelerator.current_accelerator().type` (or `x.device.type != \"cpu\"`)",
    node_types=(ast.Attribute,),
    check=check,
    prefilter=r"is_cuda",
    tied_to_cuda=True,
)
