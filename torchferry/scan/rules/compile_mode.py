"""TF007: `torch.compile(mode=...)` modes are Inductor tunings the target ignores.

The modes that capture CUDA graphs are TF025's (`cuda_graph_mode`); this rule takes the rest.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword
from torchferry.scan.rules.cuda_graph_mode import CUDA_GRAPH_MODES


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    mode = keyword(node, "mode")
    if mode is None:
        return
    value = mode.value
    if isinstance(value, cst.Name) and value.value == "None":
        return
    if isinstance(value, cst.SimpleString) and value.evaluated_value in {"default", *CUDA_GRAPH_MODES}:
        return
    shown = value.evaluated_value if isinstance(value, cst.SimpleString) else "<expression>"
    yield Hit(mode, message=f"torch.compile mode {shown!r} is ignored by the TorchNeuron backend; "
                            "its speed-up (autotuning) will not carry over.")


RULE = Rule(
    id="TF007",
    name="compile-mode",
    severity=Severity.WARNING,
    summary="A torch.compile `mode=` other than the default (CUDA-graph modes: TF025) is ignored on the target; "
    "don't count on its speed-up.",
    fix="drop `mode=` (or leave it, knowing the target ignores it) and measure with `ferry check`",
    node_types=(cst.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
)
