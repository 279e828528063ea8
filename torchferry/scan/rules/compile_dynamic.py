"""TF008: `torch.compile(dynamic=True)`, which the target rejects."""

from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    dynamic = keyword(node, "dynamic")
    if dynamic is not None and isinstance(dynamic.value, cst.Name) and dynamic.value.value == "True":
        yield Hit(dynamic)


RULE = Rule(
    id="TF008",
    name="compile-dynamic",
    severity=Severity.ERROR,
    summary="torch.compile(dynamic=True) is rejected by the TorchNeuron backend, which compiles static shapes only.",
    fix="drop `dynamic=True`; pad or bucket inputs to a few fixed shapes",
    node_types=(cst.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
)
