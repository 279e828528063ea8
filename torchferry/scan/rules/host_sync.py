"""TF021: reading a tensor's value on the host inside a forward or a training step.

`.item()`, `.tolist()`, `.cpu()`, `bool(t)` / `float(t)` / `int(t)`, a tensor as an
`if`/`while`/`assert` condition, and `print(t)` all wait for the device and copy to the
host, every step; the built-in device counts each in `torchferry.device.host_syncs()`. Logging
under `if step % N == 0:` is the usual cure, so reads guarded by a modulo test are not reported.
"""

from collections.abc import Iterator

import ast

from torchferry.scan.regions import REGION_WORDS
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import AttributeName
from torchferry.scan.tensors import argument_values

READ_METHODS = {"item", "tolist", "cpu"}
CONVERSIONS = {"builtins.bool", "builtins.float", "builtins.int"}
SOURCE = "TorchNeuron FAQ, pytorch-native-overview: printing or reading a tensor ends the current fusion"


def _has_modulo(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def _every_n_steps(node: ast.AST, ctx) -> bool:
    """Under `if step % N == 0:` (or any condition with a modulo) inside the region."""
    return any(isinstance(n, ast.If) and _has_modulo(n.test) for n in ctx.regions.path_to_region(node))


def _printed_tensor(call: ast.Call, ctx) -> bool:
    """A tensor among the values printed: a positional argument (`*xs` and `**kw` count as one), or in an f-string."""
    values = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
    values += [k.value for k in call.keywords if k.arg is None]
    for value in values:
        if isinstance(value, ast.JoinedStr):
            if any(isinstance(part, ast.FormattedValue) and ctx.tensors.is_tensor(part.value)
                   for part in value.values):
                return True
        elif ctx.tensors.is_tensor(value):
            return True
    return False


def _operands(test: ast.AST) -> Iterator[ast.AST]:
    """The values whose truth a condition takes: through `not`, `and`, `or`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _operands(test.operand)
    elif isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _operands(value)
    else:
        yield test


def _read(node: ast.AST, ctx) -> tuple[object, str] | None:
    """The node to report and how the read is written, or None."""
    if isinstance(node, ast.Call):
        func = node.func
        arguments = argument_values(node)
        if isinstance(func, ast.Attribute) and func.attr in READ_METHODS and not arguments:
            return None if ctx.tensors.is_numpy(func.value) else (AttributeName(func), f".{func.attr}()")
        qualname = ctx.qualname(func)
        if qualname in CONVERSIONS and len(arguments) == 1 and ctx.tensors.is_tensor(arguments[0]):
            return node, f"{qualname.split('.')[1]}(tensor)"
        if qualname == "builtins.print" and _printed_tensor(node, ctx):
            return node, "print(tensor)"
        return None
    for operand in _operands(node.test):
        if ctx.tensors.is_tensor(operand):
            keyword = {ast.If: "if", ast.While: "while", ast.Assert: "assert"}[type(node)]
            return operand, f"{keyword} <tensor>"
    return None


def check(node: ast.Call | ast.If | ast.While | ast.Assert, ctx) -> Iterator[Hit]:
    found = _read(node, ctx)
    if found is None:
        return
    region = ctx.regions.region(node)
    if region is None or _every_n_steps(node, ctx):
        return
    where, written = found
    yield Hit(where, message=(f"`{written}` in a {region} reads a tensor on the host each time: the step waits "
                              f"for the device, and torch.compile breaks the graph there [{SOURCE}]."))


RULE = Rule(
    id="TF021",
    name="host-sync-in-step",
    severity=Severity.WARNING,
    summary="A tensor is read on the host (`.item()`, `.tolist()`, `.cpu()`, `bool(t)`, `print(t)`, `if t:`) in a "
    "forward or training step: a device sync and a graph break every step.",
    fix="keep values on the device (`total += loss.detach()`) and read them every N steps "
    "(`if step % N == 0:`) or once per epoch",
    node_types=(ast.Call, ast.If, ast.While, ast.Assert),
    check=check,
    prefilter=REGION_WORDS,
)
