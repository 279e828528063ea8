"""TF021: reading a tensor's value on the host inside a forward or a training step.

`.item()`, `.tolist()`, `.cpu()`, `bool(t)` / `float(t)` / `int(t)`, a tensor as an
`if`/`while`/`assert` condition, and `print(t)` all wait for the device and copy to the
host, every step; the built-in device counts each in `torchferry.device.host_syncs()`. Logging
under `if step % N == 0:` is the usual cure, so reads guarded by a modulo test are not reported.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.scan.regions import REGION_WORDS
from torchferry.report.scan import Hit, Rule, Severity

READ_METHODS = {"item", "tolist", "cpu"}
CONVERSIONS = {"builtins.bool", "builtins.float", "builtins.int"}
SOURCE = "TorchNeuron FAQ, pytorch-native-overview: printing or reading a tensor ends the current fusion"


def _has_modulo(node: cst.CSTNode) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Modulo(self, _: cst.Modulo) -> None:
            found.append(True)

    node.visit(_Find())
    return bool(found)


def _every_n_steps(node: cst.CSTNode, ctx) -> bool:
    """Under `if step % N == 0:` (or any condition with a modulo) inside the region."""
    return any(isinstance(n, cst.If) and _has_modulo(n.test) for n in ctx.regions.path_to_region(node))


def _printed_tensor(call: cst.Call, ctx) -> bool:
    for arg in call.args:
        if arg.keyword is not None:
            continue
        value = arg.value
        if isinstance(value, cst.FormattedString):
            if any(isinstance(part, cst.FormattedStringExpression) and ctx.tensors.is_tensor(part.expression)
                   for part in value.parts):
                return True
        elif ctx.tensors.is_tensor(value):
            return True
    return False


def _operands(test: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The values whose truth a condition takes: through `not`, `and`, `or`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        yield from _operands(test.expression)
    elif isinstance(test, cst.BooleanOperation):
        yield from _operands(test.left)
        yield from _operands(test.right)
    else:
        yield test


def _read(node: cst.CSTNode, ctx) -> tuple[cst.CSTNode, str] | None:
    """The node to report and how the read is written, or None."""
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in READ_METHODS and not node.args:
            return None if ctx.tensors.is_numpy(func.value) else (func.attr, f".{func.attr.value}()")
        qualname = ctx.qualname(func)
        if qualname in CONVERSIONS and len(node.args) == 1 and ctx.tensors.is_tensor(node.args[0].value):
            return node, f"{qualname.split('.')[1]}(tensor)"
        if qualname == "builtins.print" and _printed_tensor(node, ctx):
            return node, "print(tensor)"
        return None
    for operand in _operands(node.test):
        if ctx.tensors.is_tensor(operand):
            keyword = {cst.If: "if", cst.While: "while", cst.Assert: "assert"}[type(node)]
            return operand, f"{keyword} <tensor>"
    return None


def check(node: cst.Call | cst.If | cst.While | cst.Assert, ctx) -> Iterator[Hit]:
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
    node_types=(cst.Call, cst.If, cst.While, cst.Assert),
    check=check,
    prefilter=REGION_WORDS,
)
