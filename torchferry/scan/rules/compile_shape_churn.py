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

from torchferry.scan.host_ops import profile_source
from torchferry.scan.syntax import full_name, keyword
from torchferry.scan.tensors import argument_values
from torchferry.report.scan import Hit, Rule, Severity

# transformers collators that pad to the longest example of each batch unless told otherwise
COLLATORS = {"DataCollatorWithPadding", "DataCollatorForSeq2Seq", "DataCollatorForTokenClassification",
             "DataCollatorForLanguageModeling", "DataCollatorForWholeWordMask"}
DYNAMIC_PADDING = {"longest", True}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _compiles_a_model(node: ast.AST) -> bool:
    """`torch_compile=True`, or `<...model...>.compile(...)`."""
    if isinstance(node, ast.keyword):
        return node.arg == "torch_compile" and isinstance(node.value, ast.Constant) and node.value.value is True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
            and "model" in (full_name(node.func.value) or ""))


def _compiles(node: ast.AST, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """`torch.compile` (called or as a decorator), or `_compiles_a_model`."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return ctx.is_outermost(node) and ctx.qualname(node) == "torch.compile"
    return _compiles_a_model(node)


def _compiled_at(ctx) -> int | None:  # noqa: ANN001 - engine.AstContext
    """The line of the first place this source compiles a model (found once per source)."""
    key = ("TF022 compiled at",)
    if key not in ctx.memo:
        ctx.memo[key] = min((ctx.line(n) for n in ctx.tree.nodes() if _compiles(n, ctx)), default=None)
    return ctx.memo[key]


def _may_compile(tree) -> bool:  # noqa: ANN001 - a syntax.SourceTree
    """The gate: what `_compiles` looks for, without resolving every name."""
    return tree.can_refer_to(("torch.compile",)) or any(_compiles_a_model(n) for n in tree.nodes())


def _literal(arg: ast.keyword | None, ctx) -> object:  # noqa: ANN001 - engine.AstContext
    if arg is None:
        return None
    literal = ctx.tree.string_literal(arg.value)
    if literal is not None:
        return literal.value
    value = arg.value
    if isinstance(value, ast.Constant) and any(value.value is v for v in (True, False, None)):
        return value.value
    return ...  # an expression: unknown


def _pads_to_longest(call: ast.Call, ctx) -> str | None:  # noqa: ANN001 - engine.AstContext
    """How `call` pads to the batch's longest member, or None when it pads to a fixed length (or not at all)."""
    if keyword(call, "pad_to_multiple_of") is not None:
        return None
    qualname = ctx.qualname(call.func) or ""
    last = qualname.rsplit(".", 1)[-1]
    padding = _literal(keyword(call, "padding"), ctx)
    if last in COLLATORS:
        return f"{last} without pad_to_multiple_of" if padding in (None, True, "longest") else None
    if padding is not None and padding in DYNAMIC_PADDING:
        return f"padding={padding!r}"
    if qualname == "torch.nn.utils.rnn.pad_sequence" and not _pads_again(call, ctx):
        return "pad_sequence"
    if qualname == "builtins.max" and _longest_in_batch(call) and _in_collate(call, ctx):
        return "max(len(...)) in a collate function"
    return None


def _longest_in_batch(call: ast.Call) -> bool:
    """`max(len(x) for x in batch)`, `max([len(x) ...])`, `max(map(len, batch))`."""
    arguments = argument_values(call)
    if len(arguments) != 1:
        return False
    arg = arguments[0]
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
        elt = arg.elt
        return isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "len"
    if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map"):
        return False
    mapped = argument_values(arg)
    return bool(mapped) and isinstance(mapped[0], ast.Name) and mapped[0].id == "len"


def _in_collate(node: ast.AST, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """Inside a function named `...collate...`, or one this source passes as `collate_fn=`."""
    scope = next((n for n in ctx.tree.ancestors(node) if isinstance(n, _FUNCTIONS)), None)
    if scope is None:
        return False
    name = scope.name
    if "collate" in name.lower():
        return True
    return any(isinstance(n, ast.keyword) and n.arg == "collate_fn" and isinstance(n.value, ast.Name)
               and n.value.id == name for n in ctx.tree.nodes())


def _pads_again(call: ast.Call, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """The function around `call` also pads to a fixed length with `torch.nn.functional.pad`."""
    scope = next(n for n in ctx.tree.ancestors(call) if isinstance(n, (*_FUNCTIONS, ast.Module)))
    return any(isinstance(n, ast.Call) and ctx.qualname(n.func) == "torch.nn.functional.pad" for n in ast.walk(scope))


def check(node: ast.Call, ctx) -> Iterator[Hit]:
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
    node_types=(ast.Call,),
    check=check,
    prefilter=r"compile",
    gate=_may_compile,
)
