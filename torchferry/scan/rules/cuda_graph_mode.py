"""TF025: torch.compile modes that capture CUDA graphs (`reduce-overhead`, `max-autotune`).

CUDA graphs replay a recorded launch sequence to hide launch overhead. TorchNeuron has no
equivalent: its backend supports `mode="default"` only, warns on any other mode and compiles
with the default (torch-neuronx README, Limitations; neuron_dynamo_backend/backend.py), as
the built-in device's backend does. The overhead the mode hid on CUDA comes back.
"""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import keyword, refers_to
from torchferry.report.scan import Hit, Rule, Severity

# Inductor's mode table (torch._inductor.list_mode_options()): the modes that set triton.cudagraphs.
CUDA_GRAPH_MODES = {"reduce-overhead", "max-autotune"}
CUDA_GRAPH_OPTION = "triton.cudagraphs"


def _cuda_graph_option(options: ast.keyword | None, ctx) -> ast.expr | None:  # noqa: ANN001 - engine.AstContext
    """The key of `"triton.cudagraphs": <not False>` in `options={...}` (where libcst's dict element starts)."""
    if options is None or not isinstance(options.value, ast.Dict):
        return None
    for key, value in zip(options.value.keys, options.value.values):
        literal = ctx.tree.string_literal(key)
        if (literal is not None and literal.value == CUDA_GRAPH_OPTION
                and not (isinstance(value, ast.Constant) and value.value is False)):
            return key
    return None


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    mode = keyword(node, "mode")
    literal = ctx.tree.string_literal(mode.value) if mode is not None else None
    if literal is not None and literal.value in CUDA_GRAPH_MODES:
        shown = f"mode={literal.value!r}"
        where: ast.AST = mode
    else:
        where = _cuda_graph_option(keyword(node, "options"), ctx)
        if where is None:
            return
        shown = f"options {{{CUDA_GRAPH_OPTION!r}: ...}}"
    yield Hit(where, message=(
        f"torch.compile {shown} captures CUDA graphs, which TorchNeuron lacks: its backend warns and compiles "
        "with mode='default' (torch-neuronx README, Limitations), so the launch overhead they hid comes back."))


RULE = Rule(
    id="TF025",
    name="cuda-graph-mode",
    severity=Severity.WARNING,
    summary="A torch.compile mode or option that captures CUDA graphs (`reduce-overhead`, `max-autotune`); "
    "TorchNeuron has no equivalent and compiles with the default mode.",
    fix="drop `mode=` on the target; cut per-step overhead with larger batches or fewer graph breaks, "
    "and measure with `ferry check`",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
)
