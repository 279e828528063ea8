"""TF011: `torch.utils.cpp_extension.CUDAExtension` builds .cu sources with nvcc."""

from collections.abc import Iterator

import ast

from torchferry.report.scan import Hit, Rule, Severity


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    if ctx.is_outermost(node) and ctx.qualname(node) == "torch.utils.cpp_extension.CUDAExtension":
        yield Hit(node)


RULE = Rule(
    id="TF011",
    name="cuda-extension",
    severity=Severity.ERROR,
    summary="A `CUDAExtension` needs nvcc and a CUDA GPU; it neither builds nor loads on another accelerator.",
    fix="build a `CppExtension` with a CPU path, or guard the extension and fall back to PyTorch ops",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"CUDAExtension",
    tied_to_cuda=True,
)
