"""TF010: hand-written Triton kernels (`@triton.jit`) compile for GPUs only."""

from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity


def check(node: cst.Decorator, ctx) -> Iterator[Hit]:
    target = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
    if ctx.qualname(target) == "triton.jit":
        yield Hit(node.decorator)


RULE = Rule(
    id="TF010",
    name="triton-kernel",
    severity=Severity.ERROR,
    summary="A custom Triton kernel (`@triton.jit`) compiles for NVIDIA/AMD GPUs only.",
    fix="keep a PyTorch reference implementation and dispatch to it off GPU (or write a target kernel)",
    node_types=(cst.Decorator,),
    check=check,
    prefilter=r"triton",
)
