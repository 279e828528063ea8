"""TF007: `torch.compile(mode=...)` modes are Inductor tunings the target ignores.

The modes that capture CUDA graphs are TF025's (`cuda_graph_mode`); this rule takes the rest.
"""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import keyword, refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rules.cuda_graph_mode import CUDA_GRAPH_MODES


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    mode = keyword(node, "mode")
    if mode is None:
        return
    value = mode.value
    if isinstance(value, ast.Constant) and value.value is None:
        return
    literal = ctx.tree.string_literal(value)
    if literal is not None and literal.value in {"default", *CUDA_GRAPH_MODES}:
        return
    shown = literal.value if literal is not None else "<expression>"
    yield Hit(mode, message=f"torch.compile mode {shown!r} is ignored by the TorchNeuron backend; "
                            "its speed-up (autotuning) will not carry over.")


RULE = Rule(
    id="TF007",
    name="compile-mode",
    severity=Severity.WARNING,
    summary="A torch.compile `mode=` other than the default (CUDA-graph modes: TF025) is ignored on the target; "
    "don't count on its speed-up.",
    fix="drop `mode=` (or leave it, knowing the target ignores it) and measure with `ferry check`",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
    tied_to_cuda=True,
)
