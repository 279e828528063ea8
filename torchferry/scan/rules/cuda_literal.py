"""TF002: a `"cuda"` / `"cuda:N"` string (or `f"cuda:{rank}"`) names the device."""

import ast
import re
from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import DEVICE_TYPE, expr
from torchferry.scan.slots import is_device_slot

_CUDA = re.compile(r"cuda(:\d+)?")


def _formatted_device(node: cst.FormattedString) -> bool:
    """`f"cuda:{i}"`: the text before the first placeholder is exactly "cuda:"."""
    parts = node.parts
    return (len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:"
            and isinstance(parts[1], cst.FormattedStringExpression))


def check(node: cst.SimpleString | cst.FormattedString, ctx) -> Iterator[Hit]:
    if isinstance(node, cst.FormattedString):
        if _formatted_device(node):
            yield Hit(node, message='f"cuda:{...}" names a CUDA device by number; it fails on any other accelerator.')
        return
    value = node.evaluated_value
    if not (isinstance(value, str) and _CUDA.fullmatch(value)):
        return
    # Only a bare "cuda" in a device slot is rewritten: the replacement is the same str on CUDA.
    safe = value == "cuda" and is_device_slot(node, ctx)
    yield Hit(node, message=f'"{value}" names a CUDA device; it fails on any other accelerator.',
              fix=(lambda _: expr(DEVICE_TYPE)) if safe else None)



def _has_cuda_text(tree) -> bool:  # noqa: ANN001 - a syntax.SourceTree
    """The gate: some string in the source holds "cuda" (Python joins `"cuda" "x"`, libcst reports each part)."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "cuda" in n.value for n in tree.nodes())

RULE = Rule(
    id="TF002",
    name="cuda-device-literal",
    severity=Severity.ERROR,
    summary='A "cuda" device string ties the code to CUDA.',
    fix='`torch.accelerator.current_accelerator()` (a device) or its `.type` (a str) instead of "cuda"',
    safe_fix='"cuda" passed straight to torch as a device (`device=`, `device_type=`, `map_location=`, '
    '`torch.device(...)`, `.to(...)`) -> the current accelerator type; "cuda:N" and stored strings are left alone',
    node_types=(cst.SimpleString, cst.FormattedString),
    check=check,
    prefilter=r"cuda",
    gate=_has_cuda_text,
)
