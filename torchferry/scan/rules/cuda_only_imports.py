"""TF009: imports of libraries that ship CUDA kernels only."""

from collections.abc import Iterator

import ast

from torchferry.scan.syntax import ImportedName, refers_to
from torchferry.report.scan import Hit, Rule, Severity

# package -> what to use instead
PACKAGES = {
    "flash_attn": "torch.nn.functional.scaled_dot_product_attention",
    "bitsandbytes": "torchao quantization, or full-precision optimizers",
    "apex": "torch.amp and torch.optim (fused=False) / torch.nn.LayerNorm",
    "xformers": "torch.nn.functional.scaled_dot_product_attention",
    "pycuda": "torch tensors on torch.accelerator",
    "cupy": "torch tensors on torch.accelerator",
}


def _modules(node: ast.Import | ast.ImportFrom, ctx) -> list[ImportedName]:  # noqa: ANN001 - engine.AstContext
    if isinstance(node, ast.ImportFrom) and node.level:
        return []
    return ctx.tree.imported_names(node)


def check(node: ast.Import | ast.ImportFrom, ctx) -> Iterator[Hit]:
    for name_node in _modules(node, ctx):
        module = name_node.name
        package = module.split(".")[0]
        if package in PACKAGES:
            yield Hit(name_node, message=f"`{module}` ships CUDA kernels only; it will not import or run "
                                         f"on another accelerator (use {PACKAGES[package]}).")


RULE = Rule(
    id="TF009",
    name="cuda-only-import",
    severity=Severity.ERROR,
    summary="A CUDA-only library (flash_attn, bitsandbytes, apex, xformers, pycuda, cupy) is imported.",
    fix="replace it with the PyTorch built-in named in the message",
    node_types=(ast.Import, ast.ImportFrom),
    check=check,
    prefilter=r"flash_attn|bitsandbytes|apex|xformers|pycuda|cupy",
    gate=refers_to(*PACKAGES),
    tied_to_cuda=True,
)
