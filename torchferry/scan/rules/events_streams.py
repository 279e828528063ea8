"""TF016: `torch.cuda.Event` / `torch.cuda.Stream` and friends.

Not rewritten: `torch.Event` takes `device` as its first parameter where `torch.cuda.Event`
takes `enable_timing`, and CUDA-typed objects mix with generic ones in `torch.cuda.stream()`
and `.record(stream)`, so a rename could change behaviour on CUDA.
"""

from collections.abc import Iterator

import ast

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity

EQUIVALENTS = {
    "torch.cuda.Event": "torch.Event(enable_timing=...)",
    "torch.cuda.Stream": "torch.Stream()",
    "torch.cuda.current_stream": "torch.accelerator.current_stream()",
    "torch.cuda.default_stream": "torch.accelerator.current_stream() (before any set_stream)",
    "torch.cuda.set_stream": "torch.accelerator.set_stream(...)",
    "torch.cuda.stream": "`with torch.Stream():` (a stream is its own context manager)",
}


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if name in EQUIVALENTS:
        yield Hit(node, message=f"`{name}` is CUDA-only; use {EQUIVALENTS[name]}.")


RULE = Rule(
    id="TF016",
    name="cuda-event-stream",
    severity=Severity.WARNING,
    summary="A `torch.cuda` Event/Stream API is CUDA-only; `torch.Event`, `torch.Stream` and "
    "`torch.accelerator.*_stream` work on every accelerator.",
    fix="`torch.Event` / `torch.Stream` / `torch.accelerator.current_stream()` / `torch.accelerator.set_stream()`",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to(*EQUIVALENTS),
    tied_to_cuda=True,
)
