"""TF008: `torch.compile(dynamic=True)`, which the target rejects."""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import keyword, refers_to
from torchferry.report.scan import Hit, Rule, Severity


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    dynamic = keyword(node, "dynamic")
    if dynamic is not None and isinstance(dynamic.value, ast.Constant) and dynamic.value.value is True:
        yield Hit(dynamic)


RULE = Rule(
    id="TF008",
    name="compile-dynamic",
    severity=Severity.ERROR,
    summary="torch.compile(dynamic=True) is rejected by the TorchNeuron backend, which compiles static shapes only.",
    fix="drop `dynamic=True`; pad or bucket inputs to a few fixed shapes",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
    tied_to_cuda=True,
)
