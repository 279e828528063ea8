"""Where a string literal is consumed by torch as a device or a backend name, and nothing else.

Replacing a literal there cannot change what user code sees: torch parses it at once. A
literal anywhere else (`device = "cuda"`, `if kind == "cuda":`) may be compared later, so
rules report it without rewriting it.
"""

from __future__ import annotations

import libcst as cst

# Calls whose first positional argument is a device (or device type).
DEVICE_FIRST = {"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.Generator"}
# Keywords that take a device in torch calls (and in `.to(...)`).
DEVICE_KEYWORDS = {"device", "device_type", "map_location"}


def argument_of(node: cst.BaseExpression, ctx) -> tuple[cst.Call, cst.Arg] | None:
    """The call and argument that `node` is passed as, directly or as one branch of `a if c else b`."""
    value, parent = node, ctx.parent(node)
    if isinstance(parent, cst.IfExp) and node in (parent.body, parent.orelse):
        value, parent = parent, ctx.parent(parent)
    if not (isinstance(parent, cst.Arg) and parent.value is value):
        return None
    call = ctx.parent(parent)
    return (call, parent) if isinstance(call, cst.Call) else None


def is_device_slot(node: cst.BaseExpression, ctx) -> bool:
    """True when `node` is a device argument of a torch call or of `.to(...)`."""
    found = argument_of(node, ctx)
    if found is None:
        return False
    call, arg = found
    callee = ctx.qualname(call.func) or ""
    is_to = isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
    if arg.keyword is not None:
        return arg.keyword.value in DEVICE_KEYWORDS and (is_to or callee.startswith("torch."))
    return arg is call.args[0] and (is_to or callee in DEVICE_FIRST)


def is_backend_slot(node: cst.BaseExpression, ctx) -> bool:
    """True when `node` is the backend argument of `init_process_group` or `new_group`."""
    found = argument_of(node, ctx)
    if found is None:
        return False
    call, arg = found
    callee = (ctx.qualname(call.func) or "").rsplit(".", 1)[-1]
    if callee not in ("init_process_group", "new_group"):
        return False
    if arg.keyword is not None:
        return arg.keyword.value == "backend"
    return callee == "init_process_group" and arg is call.args[0]
