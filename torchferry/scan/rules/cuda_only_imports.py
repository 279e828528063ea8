"""TF009: imports of libraries that ship CUDA kernels only."""

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

from torchferry.scan.syntax import refers_to
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


def _modules(node: cst.Import | cst.ImportFrom) -> Iterator[tuple[cst.CSTNode, str]]:
    if isinstance(node, cst.Import):
        for alias in node.names:
            yield alias.name, get_full_name_for_node(alias.name) or ""
    elif node.module is not None and not node.relative:
        yield node.module, get_full_name_for_node(node.module) or ""


def check(node: cst.Import | cst.ImportFrom, ctx) -> Iterator[Hit]:
    for name_node, module in _modules(node):
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
    node_types=(cst.Import, cst.ImportFrom),
    check=check,
    prefilter=r"flash_attn|bitsandbytes|apex|xformers|pycuda|cupy",
    gate=refers_to(*PACKAGES),
)
