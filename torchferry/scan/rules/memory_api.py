"""TF013: `torch.cuda` memory statistics and cache calls.

Not rewritten: off CUDA, `torch.cuda.max_memory_allocated()` and `empty_cache()` quietly
return 0 / do nothing, while the `torch.accelerator` versions raise without an accelerator,
so a rewrite would break scripts that run on a CPU-only machine today.
"""

from collections.abc import Iterator

import ast

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity

# torch.cuda name -> the torch.accelerator function to use instead
EQUIVALENTS = {
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_max_memory_allocated": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
    "empty_cache": "empty_cache",
    "mem_get_info": "get_memory_info",
    "memory_summary": "memory_stats",
    "set_per_process_memory_fraction": None,
}
NAMES = {f"torch.cuda.{name}" for name in EQUIVALENTS}


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if not name or not (name in NAMES or name.startswith("torch.cuda.memory.")):
        return
    short = name.rsplit(".", 1)[-1]
    new = EQUIVALENTS.get(short)
    instead = f"`torch.accelerator.{new}`" if new else "the device's own limits (no device-neutral equivalent)"
    yield Hit(node, message=f"`{name}` reports CUDA memory only; use {instead}.")


RULE = Rule(
    id="TF013",
    name="cuda-memory-api",
    severity=Severity.WARNING,
    summary="A `torch.cuda` memory call measures or frees CUDA memory only.",
    fix="the `torch.accelerator` memory function of the same name (guard it with `torch.accelerator.is_available()`)",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to(*NAMES),
    tied_to_cuda=True,
)
