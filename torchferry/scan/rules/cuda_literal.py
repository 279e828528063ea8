"""TF002: a `"cuda"` / `"cuda:N"` string (or `f"cuda:{rank}"`) names the device."""

import ast
import re
from collections.abc import Iterator

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import DEVICE_TYPE, expr
from torchferry.scan.slots import is_compared, is_device_slot
from torchferry.scan.syntax import Literal

_CUDA = re.compile(r"cuda(:\d+)?")


def _formatted_device(node: ast.JoinedStr) -> bool:
    """`f"cuda:{i}"`: the text before the first placeholder is exactly "cuda:"."""
    parts = node.values
    return (len(parts) == 2 and isinstance(parts[0], ast.Constant) and parts[0].value == "cuda:"
            and isinstance(parts[1], ast.FormattedValue))


def literals(node: ast.Constant | ast.JoinedStr, word: str, ctx) -> list[Literal]:  # noqa: ANN001 - engine.AstContext
    """The string literals written at `node` (`"a" "b"` is two: `SourceTree.written_strings`), when `node` is a
    string that holds `word` (in any case) as ast joins it: a cheap test first, the split only where it passes."""
    if isinstance(node, ast.Constant):
        if not (isinstance(node.value, str) and word in node.value.lower()):
            return []
    elif not any(isinstance(p, ast.Constant) and word in p.value.lower() for p in node.values):
        return []
    return ctx.tree.written_strings(node)


def check(node: ast.Constant | ast.JoinedStr, ctx) -> Iterator[Hit]:
    pieces = literals(node, "cuda", ctx)
    for piece in pieces:
        if isinstance(piece.value, ast.JoinedStr):
            if _formatted_device(piece.value):
                yield Hit(piece, message='f"cuda:{...}" names a CUDA device by number; it fails on any other '
                                         'accelerator.')
            continue
        value = piece.value.value
        if not (isinstance(value, str) and _CUDA.fullmatch(value)):
            continue
        if is_compared(node, ctx):
            yield Hit(piece, message=f'"{value}" is compared, not passed to torch as a device: the test is false on '
                                     'every other accelerator, which takes the code\'s other path.',
                      severity=Severity.INFO)
            continue
        # Only a bare "cuda" in a device slot is rewritten: the replacement is the same str on CUDA.
        safe = value == "cuda" and len(pieces) == 1 and is_device_slot(node, ctx)
        yield Hit(piece, message=f'"{value}" names a CUDA device; it fails on any other accelerator.',
                  fix=(lambda _: expr(DEVICE_TYPE)) if safe else None)


RULE = Rule(
    id="TF002",
    name="cuda-device-literal",
    severity=Severity.ERROR,
    summary='A "cuda" device string ties the code to CUDA.',
    fix='`torch.accelerator.current_accelerator()` (a device) or its `.type` (a str) instead of "cuda"',
    safe_fix='"cuda" passed straight to torch as a device (`device=`, `device_type=`, `map_location=`, '
    '`torch.device(...)`, `.to(...)`) -> the current accelerator type; "cuda:N" and stored strings are left alone',
    node_types=(ast.Constant, ast.JoinedStr),
    check=check,
    prefilter=r"cuda",
    tied_to_cuda=True,
    picks_device=True,
)
