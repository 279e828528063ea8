"""TF012: `torch.backends.cudnn.*` / `torch.backends.cuda.*` settings, read by CUDA libraries only."""

from collections.abc import Iterator

import ast

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity

PREFIXES = ("torch.backends.cudnn.", "torch.backends.cuda.")


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if name and name.startswith(PREFIXES):
        yield Hit(node, message=f"`{name}` is read by cuDNN/cuBLAS only; it has no effect on another accelerator.")


RULE = Rule(
    id="TF012",
    name="cuda-backend-setting",
    severity=Severity.INFO,
    summary="A `torch.backends.cudnn` / `torch.backends.cuda` setting has no effect on another accelerator.",
    fix="use device-neutral settings: `torch.use_deterministic_algorithms(...)`, "
    "`torch.set_float32_matmul_precision(...)`",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda|cudnn",
    gate=refers_to("torch.backends.cudnn", "torch.backends.cuda"),
    tied_to_cuda=True,
)
