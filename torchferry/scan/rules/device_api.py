"""TF003: `torch.cuda` device calls that `torch.accelerator` provides for every device.

Renaming a guard changes which code runs: `if torch.cuda.is_available():` is False on a Neuron
machine, `torch.accelerator.is_available()` is True, so the guarded block starts to run there.
The rename is therefore safe only when every CUDA-tied call in the blocks the guard decides
(its body and its `else`) is fixed too; otherwise the guard is reported and left as it is, with
the call that would run unfixed named. A guard is the test of an `if`, a `while` or a
conditional expression, through `not`, `and`, `or` and comparisons, or a name assigned the
call and tested by such a guard in the same source.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import refers_to
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


def _enclosing(node: cst.CSTNode, ctx) -> tuple[cst.CSTNode, cst.CSTNode | None]:
    """The outermost expression around ``node`` and what holds it (a guard, an assignment, a statement)."""
    child, parent = node, ctx.parent(node)
    while isinstance(parent, (cst.BaseExpression, cst.Arg, cst.ComparisonTarget)) and not isinstance(parent, GUARDS):
        child, parent = parent, ctx.parent(parent)
    return child, parent


def guards_of(node: cst.CSTNode, ctx) -> list[cst.If | cst.While | cst.IfExp]:
    """The guards ``node`` (an expression) decides: the `if` / `while` / conditional expression whose test holds
    it, or, when it is assigned to a name (`use_cuda = torch.cuda.is_available()`), every guard that tests that
    name in this source."""
    child, parent = _enclosing(node, ctx)
    if isinstance(parent, GUARDS):
        return [parent] if parent.test is child else []
    single = isinstance(parent, cst.Assign) and len(parent.targets) == 1
    if not (single and isinstance(parent.targets[0].target, cst.Name)):
        return []
    name = parent.targets[0].target.value
    key = ("TF003 guards testing", name)  # the same for every use of the name: found once per source
    if key not in ctx.memo:
        ctx.memo[key] = _guards_testing(name, ctx)
    return ctx.memo[key]


def _guards_testing(name: str, ctx) -> list[cst.If | cst.While | cst.IfExp]:  # noqa: ANN001 - engine.Context
    found: list[cst.If | cst.While | cst.IfExp] = []

    class _Tests(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, GUARDS) and _names(n.test, name):
                found.append(n)
            return True

    ctx.module.visit(_Tests())
    return found


def _names(test: cst.CSTNode, name: str) -> bool:
    seen: list[bool] = []

    class _Find(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            seen.append(n.value == name)

    test.visit(_Find())
    return any(seen)


def unfixed_in(guard: cst.If | cst.While | cst.IfExp, ctx) -> tuple[str, cst.CSTNode] | None:
    """The first CUDA-tied call (rule id, node) in the blocks ``guard`` decides that no safe fix rewrites.

    Found once per guard and source: every use of a guard's name asks again (`if use_cuda:` ... ).
    """
    key = ("TF003 unfixed in", id(guard))
    if key not in ctx.memo:
        ctx.memo[key] = _first_unfixed(guard, ctx)
    return ctx.memo[key]


def _first_unfixed(guard: cst.If | cst.While | cst.IfExp, ctx) -> tuple[str, cst.CSTNode] | None:  # noqa: ANN001
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
    hazard = next((h for h in (unfixed_in(g, ctx) for g in guards_of(node, ctx)) if h is not None), None)
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
    prefilter=r"cuda",
    gate=refers_to(*RENAMES),
)
