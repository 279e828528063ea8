"""TF003: `torch.cuda` device calls that `torch.accelerator` provides for every device.

Renaming a guard changes which code runs: `if torch.cuda.is_available():` is False on a Neuron
machine, `torch.accelerator.is_available()` is True, so the guarded block starts to run there.
The rename is therefore safe only when every CUDA-tied call in the blocks the guard decides
(its body and its `else`) is fixed too; otherwise the guard is reported and left as it is, with
the call that would run unfixed named. A guard is the test of an `if`, a `while` or a
conditional expression, through `not`, `and`, `or` and comparisons.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import expr

GUARDS = (cst.If, cst.While, cst.IfExp)
CUDA_TIED = tuple(f"TF{n:03d}" for n in range(1, 19))  # the rules of code tied to CUDA (docs/scan.md)

# torch.cuda name -> torch.accelerator name; same arguments, same result on a CUDA machine.
RENAMES = {
    "torch.cuda.synchronize": "synchronize",
    "torch.cuda.device_count": "device_count",
    "torch.cuda.current_device": "current_device_index",
    "torch.cuda.set_device": "set_device_index",
    "torch.cuda.is_available": "is_available",
}


def guard_of(node: cst.CSTNode, ctx) -> cst.If | cst.While | cst.IfExp | None:
    """The `if` / `while` / conditional expression whose test holds ``node`` (an expression), or None."""
    child, parent = node, ctx.parent(node)
    while parent is not None:
        if isinstance(parent, GUARDS):
            return parent if parent.test is child else None
        if not isinstance(parent, (cst.BaseExpression, cst.Arg, cst.ComparisonTarget)):
            return None
        child, parent = parent, ctx.parent(parent)
    return None


def unfixed_in(guard: cst.If | cst.While | cst.IfExp, ctx) -> tuple[str, cst.CSTNode] | None:
    """The first CUDA-tied call (rule id, node) in the blocks ``guard`` decides that no safe fix rewrites."""
    from torchferry.scan.rules import RULES  # the table imports this module

    rules = [r for r in RULES if r.id in CUDA_TIED and r.severity != Severity.INFO]  # info: no effect elsewhere
    found: list[tuple[str, cst.CSTNode]] = []

    class _Hazards(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            for rule in rules:
                if not found and isinstance(node, rule.node_types):
                    found.extend((rule.id, hit.node) for hit in rule.check(node, ctx) if hit.fix is None)
            return not found

    for block in (guard.body, guard.orelse):
        if block is not None and not found:
            block.visit(_Hazards())
    return found[0] if found else None


def check(node: cst.BaseExpression, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if name not in RENAMES:
        return
    new = f"torch.accelerator.{RENAMES[name]}"
    message = f"`{name}` works only on CUDA; `{new}` works on every accelerator."
    guard = guard_of(node, ctx)
    hazard = unfixed_in(guard, ctx) if guard is not None else None
    if hazard is not None:
        line = ctx.positions[hazard[1]].start.line
        yield Hit(node, message=(
            f"{message} Not rewritten: this guard decides a block with a CUDA-only call that no safe fix rewrites "
            f"({hazard[0]}, line {line}); renaming the guard alone would run that call on the new device. Fix the "
            "block, then the guard."))
        return
    yield Hit(node, message=message, fix=lambda _: expr(new))


RULE = Rule(
    id="TF003",
    name="cuda-device-api",
    severity=Severity.WARNING,
    summary="A `torch.cuda` device call has a `torch.accelerator` equivalent that works on every device.",
    fix="`torch.accelerator.synchronize / device_count / current_device_index / set_device_index / is_available`",
    safe_fix="renamed to the `torch.accelerator` function (same arguments); a guard (`if torch.cuda.is_available():`) "
    "only when every CUDA-only call in the blocks it decides is fixed too",
    node_types=(cst.Name, cst.Attribute),
    check=check,
)
