"""TF010: hand-written Triton kernels (`@triton.jit`) compile for GPUs only."""

from collections.abc import Iterator

import ast

from torchferry.report.scan import Hit, Rule, Severity

_DECORATED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def check(node: ast.expr, ctx) -> Iterator[Hit]:
    """`node` is any expression: a decorator (`@triton.jit`, `@triton.jit(...)`) is checked where it is written."""
    parent = ctx.parent(node)
    if not (isinstance(parent, _DECORATED) and node in parent.decorator_list):
        return
    target = node.func if isinstance(node, ast.Call) else node
    if ctx.qualname(target) == "triton.jit":
        yield Hit(node)


RULE = Rule(
    id="TF010",
    name="triton-kernel",
    severity=Severity.ERROR,
    summary="A custom Triton kernel (`@triton.jit`) compiles for NVIDIA/AMD GPUs only.",
    fix="keep a PyTorch reference implementation and dispatch to it off GPU (or write a target kernel)",
    node_types=(ast.Name, ast.Attribute, ast.Call, ast.Subscript),
    check=check,
    prefilter=r"triton",
    tied_to_cuda=True,
)
