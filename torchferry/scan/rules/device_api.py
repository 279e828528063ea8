"""TF003: `torch.cuda` device calls that `torch.accelerator` provides for every device.

Renaming a guard changes which code runs: `if torch.cuda.is_available():` is False on a Neuron
machine, `torch.accelerator.is_available()` is True, so the guarded block starts to run there.
The rename is therefore safe only when every CUDA-tied call in the blocks the guard decides
(its body and its `else`) is fixed too; otherwise the guard is reported and left as it is, with
the call that would run unfixed named. A guard is the test of an `if`, a `while` or a
conditional expression, through `not`, `and`, `or` and comparisons, or a name assigned the
call and tested by such a guard in the same source.
"""

import ast
from collections.abc import Iterator

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import expr
from torchferry.scan.syntax import ImportedName, refers_to

GUARDS = (ast.If, ast.While, ast.IfExp)
# Expressions that hold a value in a slot of their own, which ends the enclosing expression (libcst wraps those
# values in an element, slice or f-string node): `[x]`, `{k: v}`, `t[i]`, `f"{x}"`.
_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Slice, ast.JoinedStr, ast.FormattedValue)

# torch.cuda name -> torch.accelerator name; same arguments, same result on a CUDA machine.
RENAMES = {
    "torch.cuda.synchronize": "synchronize",
    "torch.cuda.device_count": "device_count",
    "torch.cuda.current_device": "current_device_index",
    "torch.cuda.set_device": "set_device_index",
    "torch.cuda.is_available": "is_available",
}


def _enclosing(node: ast.expr, ctx) -> tuple[ast.AST, ast.AST | None]:  # noqa: ANN001 - engine.AstContext
    """The outermost expression around ``node`` and what holds it (a guard, an assignment, a statement)."""
    child, parent = node, ctx.parent(node)
    while isinstance(parent, (ast.expr, ast.keyword)) and not isinstance(parent, GUARDS + _CONTAINERS):
        if isinstance(parent, ast.Subscript) and child is parent.slice:
            break
        child, parent = parent, ctx.parent(parent)
    return child, parent


def guards_of(node: ast.expr, ctx) -> list[ast.If | ast.While | ast.IfExp]:  # noqa: ANN001 - engine.AstContext
    """The guards ``node`` (an expression) decides: the `if` / `while` / conditional expression whose test holds
    it, or, when it is assigned to a name (`use_cuda = torch.cuda.is_available()`), every guard that tests that
    name in this source."""
    child, parent = _enclosing(node, ctx)
    if isinstance(parent, GUARDS):
        return [parent] if parent.test is child else []
    single = isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is child
    if not (single and isinstance(parent.targets[0], ast.Name)):
        return []
    name = parent.targets[0].id
    key = ("TF003 guards testing", name)  # the same for every use of the name: found once per source
    if key not in ctx.memo:
        ctx.memo[key] = _guards_testing(name, ctx)
    return ctx.memo[key]


def _guards_testing(name: str, ctx) -> list[ast.If | ast.While | ast.IfExp]:  # noqa: ANN001 - engine.AstContext
    guards = [n for n in ctx.tree.nodes() if isinstance(n, GUARDS) and _names(n.test, name)]
    return sorted(guards, key=lambda g: (g.lineno, g.col_offset, ctx.tree.order(g)))  # libcst's visit order


def _names(test: ast.AST, name: str) -> bool:
    """Whether `name` is written in `test`: as a name, an attribute, a keyword or a parameter (libcst's `Name`s)."""
    for n in ast.walk(test):
        written = (n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                   else n.arg if isinstance(n, (ast.keyword, ast.arg)) else None)
        if written == name:
            return True
    return False


def unfixed_in(guard: ast.If | ast.While | ast.IfExp, ctx) -> tuple[str, object] | None:  # noqa: ANN001
    """The first CUDA-tied call (rule id, node) in the blocks ``guard`` decides that no safe fix rewrites.

    Found once per guard and source: every use of a guard's name asks again (`if use_cuda:` ... ).
    """
    key = ("TF003 unfixed in", id(guard))
    if key not in ctx.memo:
        ctx.memo[key] = _first_unfixed(guard, ctx)
    return ctx.memo[key]


def _in_visit_order(roots: list[ast.AST], ctx) -> list[ast.AST | ImportedName]:  # noqa: ANN001 - engine.AstContext
    """Every node under `roots` as libcst visits them (parents first, in source order), with the dotted names of
    imports, which libcst visits as nodes and ast keeps as strings."""
    found: list[tuple[tuple[int, int], int, ast.AST | ImportedName]] = []
    pending = [(root, 0) for root in roots]
    while pending:
        node, depth = pending.pop()
        if hasattr(node, "lineno"):
            found.append((ctx.tree.start(node), depth, node))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend((ctx.tree.start(n), depth + 1, n) for n in ctx.tree.imported_names(node))
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    found.sort(key=lambda entry: entry[:2])
    return [node for _, _, node in found]


def _first_unfixed(guard: ast.If | ast.While | ast.IfExp, ctx) -> tuple[str, object] | None:  # noqa: ANN001
    from torchferry.scan.rules import RULES  # the table imports this module

    rules = [r for r in RULES if r.tied_to_cuda and r.severity != Severity.INFO]  # info: no effect elsewhere
    for block in (guard.body, guard.orelse):
        for node in _in_visit_order(block if isinstance(block, list) else [block], ctx):
            for rule in rules:
                if isinstance(node, ImportedName) and rule.node_types[0] is not ast.Name:
                    continue  # a dotted name in an import is a name to the rules that read names, and to no other
                if isinstance(node, rule.node_types) or isinstance(node, ImportedName):
                    unfixed = [(rule.id, hit.node) for hit in rule.check(node, ctx) if hit.fix is None]
                    if unfixed:
                        return unfixed[0]
    return None


def check(node: ast.Name | ast.Attribute | ImportedName, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if name not in RENAMES:
        return
    new = f"torch.accelerator.{RENAMES[name]}"
    message = f"`{name}` works only on CUDA; `{new}` works on every accelerator."
    guards = guards_of(node, ctx) if not isinstance(node, ImportedName) else []
    hazard = next((h for h in (unfixed_in(g, ctx) for g in guards) if h is not None), None)
    if hazard is not None:
        yield Hit(node, message=(
            f"{message} Not rewritten: this guard decides a block with a CUDA-only call that no safe fix rewrites "
            f"({hazard[0]}, line {ctx.line(hazard[1])}); renaming the guard alone would run that call on the new "
            "device. Fix the block, then the guard."))
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
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"cuda",
    gate=refers_to(*RENAMES),
    tied_to_cuda=True,
)
