"""TF022: batches padded to their own longest sequence, fed to a compiled model.

Neuron graphs have static shapes: each new input shape compiles a new graph. A data path
that pads every batch to its longest member (`padding=True`, a `DataCollatorWithPadding`
without `pad_to_multiple_of`, `pad_sequence`, or a collate function that sizes the batch by
`max(len(x) for x in batch)`) makes a new shape on most batches. Reported
only where this source also compiles a model; the severity is `info` because the scan cannot
see that these batches reach the compiled model, nor how many lengths occur.
"""

import ast
from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

from torchferry.scan.host_ops import profile_source
from torchferry.scan.syntax import full_name
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword

# transformers collators that pad to the longest example of each batch unless told otherwise
COLLATORS = {"DataCollatorWithPadding", "DataCollatorForSeq2Seq", "DataCollatorForTokenClassification",
             "DataCollatorForLanguageModeling", "DataCollatorForWholeWordMask"}
DYNAMIC_PADDING = {"longest", True}


def _compiled_at(ctx) -> int | None:
    """The line of the first `torch.compile` (call or decorator), `torch_compile=True` or `model.compile()`."""
    lines = []

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Name, cst.Attribute)) and ctx.is_outermost(node) \
                    and ctx.qualname(node) == "torch.compile":
                lines.append(node)
            elif isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "torch_compile" \
                    and isinstance(node.value, cst.Name) and node.value.value == "True":
                lines.append(node)
            elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                  and node.func.attr.value == "compile" and "model" in (get_full_name_for_node(node.func.value) or "")):
                lines.append(node)
            return True

    ctx.module.visit(_Find())
    return min((ctx.positions[n].start.line for n in lines), default=None)


def _may_compile(tree) -> bool:  # noqa: ANN001 - a syntax.SourceTree
    """What `_compiled_at` looks for, on Python's tree: a name that can mean `torch.compile`,
    `torch_compile=True`, or `<...model...>.compile(...)`."""
    if tree.can_refer_to(("torch.compile",)):
        return True
    return any((isinstance(n, ast.keyword) and n.arg == "torch_compile" and isinstance(n.value, ast.Constant)
                and n.value.value is True)
               or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "compile"
                   and "model" in (full_name(n.func.value) or ""))
               for n in tree.nodes())


def _literal(arg: cst.Arg | None) -> object:
    if arg is None:
        return None
    if isinstance(arg.value, cst.SimpleString):
        return arg.value.evaluated_value
    if isinstance(arg.value, cst.Name) and arg.value.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[arg.value.value]
    return ...  # an expression: unknown


def _pads_to_longest(call: cst.Call, ctx) -> str | None:
    """How `call` pads to the batch's longest member, or None when it pads to a fixed length (or not at all)."""
    if keyword(call, "pad_to_multiple_of") is not None:
        return None
    qualname = ctx.qualname(call.func) or ""
    last = qualname.rsplit(".", 1)[-1]
    padding = _literal(keyword(call, "padding"))
    if last in COLLATORS:
        return f"{last} without pad_to_multiple_of" if padding in (None, True, "longest") else None
    if padding is not None and padding in DYNAMIC_PADDING:
        return f"padding={padding!r}"
    if qualname == "torch.nn.utils.rnn.pad_sequence" and not _pads_again(call, ctx):
        return "pad_sequence"
    if qualname == "builtins.max" and _longest_in_batch(call) and _in_collate(call, ctx):
        return "max(len(...)) in a collate function"
    return None


def _longest_in_batch(call: cst.Call) -> bool:
    """`max(len(x) for x in batch)`, `max([len(x) ...])`, `max(map(len, batch))`."""
    if len(call.args) != 1:
        return False
    arg = call.args[0].value
    if isinstance(arg, (cst.GeneratorExp, cst.ListComp)):
        elt = arg.elt
        return isinstance(elt, cst.Call) and isinstance(elt.func, cst.Name) and elt.func.value == "len"
    return (isinstance(arg, cst.Call) and isinstance(arg.func, cst.Name) and arg.func.value == "map"
            and bool(arg.args) and isinstance(arg.args[0].value, cst.Name) and arg.args[0].value.value == "len")


def _in_collate(node: cst.CSTNode, ctx) -> bool:
    """Inside a function named `...collate...`, or one this source passes as `collate_fn=`."""
    scope = ctx.parent(node)
    while scope is not None and not isinstance(scope, cst.FunctionDef):
        scope = ctx.parent(scope)
    if scope is None:
        return False
    name = scope.name.value
    if "collate" in name.lower():
        return True
    passed = []

    class _Find(cst.CSTVisitor):
        def visit_Arg(self, arg: cst.Arg) -> None:
            if arg.keyword is not None and arg.keyword.value == "collate_fn" and isinstance(arg.value, cst.Name) \
                    and arg.value.value == name:
                passed.append(arg)

    ctx.module.visit(_Find())
    return bool(passed)


def _pads_again(call: cst.Call, ctx) -> bool:
    """The function around `call` also pads to a fixed length with `torch.nn.functional.pad`."""
    scope = ctx.parent(call)
    while scope is not None and not isinstance(scope, (cst.FunctionDef, cst.Module)):
        scope = ctx.parent(scope)
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if ctx.qualname(node.func) == "torch.nn.functional.pad":
                found.append(node)

    scope.visit(_Find())
    return bool(found)


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    how = _pads_to_longest(node, ctx)
    if how is None:
        return
    line = _compiled_at(ctx)
    if line is None:
        return
    source = profile_source("static_shapes")
    yield Hit(node.func, message=(
        f"`{how}` pads each batch to its own longest sequence, and this script compiles a model (line {line}): "
        f"each new length is a new graph, and TorchNeuron compiles one per input shape ({source})."))


RULE = Rule(
    id="TF022",
    name="compile-shape-churn",
    severity=Severity.INFO,
    summary="Batches padded to their own longest sequence go to a compiled model: one graph (and one "
    "Neuron compilation) per distinct length.",
    fix='pad to fixed lengths: `padding="max_length", max_length=L`, or `pad_to_multiple_of=64` '
    "(a few buckets)",
    node_types=(cst.Call,),
    check=check,
    prefilter=r"compile",
    gate=_may_compile,
)
