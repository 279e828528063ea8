"""Where a string literal is consumed by torch as a device or a backend name, and where it is only compared.

Replacing a literal in a device or backend slot cannot change what user code sees: torch parses
it at once. A literal anywhere else (`device = "cuda"`, `if kind == "cuda":`) may be compared
later, so rules report it without rewriting it. A literal that is compared (`device.type ==
"cuda"`) chooses nothing: off CUDA the comparison is false and the code takes its other path.
"""

from __future__ import annotations

import ast

# Calls whose first positional argument is a device (or device type).
DEVICE_FIRST = {"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.Generator"}
# Keywords that take a device in torch calls (and in `.to(...)`).
DEVICE_KEYWORDS = {"device", "device_type", "map_location"}


def argument_of(node: ast.expr, ctx) -> tuple[ast.Call, str | None] | None:  # noqa: ANN001 - engine.AstContext
    """The call that `node` is passed to, directly or as one branch of `a if c else b`, and the keyword it is passed
    as ("" for the first argument written, None for a later positional one)."""
    value, parent = node, ctx.parent(node)
    if isinstance(parent, ast.IfExp) and node in (parent.body, parent.orelse):
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.Starred):  # `f(*x)` is an argument as libcst sees it, keyword-less
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.keyword):
        call = ctx.parent(parent)
        return (call, parent.arg) if parent.arg is not None else None
    if not (isinstance(parent, ast.Call) and value in parent.args):
        return None
    first = parent.args[0] is value and not any(
        (k.lineno, k.col_offset) < (value.lineno, value.col_offset) for k in parent.keywords)
    return parent, "" if first else None


def is_device_slot(node: ast.expr, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """True when `node` is a device argument of a torch call or of `.to(...)`."""
    found = argument_of(node, ctx)
    if found is None:
        return False
    call, keyword = found
    callee = ctx.qualname(call.func) or ""
    is_to = isinstance(call.func, ast.Attribute) and call.func.attr == "to"
    if keyword:
        return keyword in DEVICE_KEYWORDS and (is_to or callee.startswith("torch."))
    return keyword == "" and (is_to or callee in DEVICE_FIRST)


def is_backend_slot(node: ast.expr, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """True when `node` is the backend argument of `init_process_group` or `new_group`."""
    found = argument_of(node, ctx)
    if found is None:
        return False
    call, keyword = found
    callee = (ctx.qualname(call.func) or "").rsplit(".", 1)[-1]
    if callee not in ("init_process_group", "new_group"):
        return False
    if keyword:
        return keyword == "backend"
    return callee == "init_process_group" and keyword == ""


def is_compared(node: ast.expr, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """True when `node` is an operand of a comparison (`x == "cuda"`, `"cuda" in str(x)`), one of the values
    `x in ("cuda", "xpu")` looks among, or what `x.startswith(...)` / `x.endswith(...)` looks for."""
    parent = ctx.parent(node)
    if isinstance(parent, (ast.List, ast.Tuple, ast.Set)) and isinstance(ctx.parent(parent), ast.Compare):
        return True
    if isinstance(parent, ast.Compare):
        return True
    return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute)
            and parent.func.attr in ("startswith", "endswith") and node in parent.args)
