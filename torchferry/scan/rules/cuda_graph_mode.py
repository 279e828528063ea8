"""TF025: torch.compile modes that capture CUDA graphs (`reduce-overhead`, `max-autotune`).

CUDA graphs replay a recorded launch sequence to hide launch overhead. TorchNeuron has no
equivalent: its backend supports `mode="default"` only, warns on any other mode and compiles
with the default (torch-neuronx README, Limitations; neuron_dynamo_backend/backend.py), as
the built-in device's backend does. The overhead the mode hid on CUDA comes back.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword

# Inductor's mode table (torch._inductor.list_mode_options()): the modes that set triton.cudagraphs.
CUDA_GRAPH_MODES = {"reduce-overhead", "max-autotune"}
CUDA_GRAPH_OPTION = "triton.cudagraphs"


def _cuda_graph_option(options: cst.Arg | None) -> cst.DictElement | None:
    if options is None or not isinstance(options.value, cst.Dict):
        return None
    for element in options.value.elements:
        if (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
                and element.key.evaluated_value == CUDA_GRAPH_OPTION
                and not (isinstance(element.value, cst.Name) and element.value.value == "False")):
            return element
    return None


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.compile":
        return
    mode = keyword(node, "mode")
    if mode is not None and isinstance(mode.value, cst.SimpleString) and mode.value.evaluated_value in CUDA_GRAPH_MODES:
        shown = f"mode={mode.value.evaluated_value!r}"
        where: cst.CSTNode = mode
    else:
        where = _cuda_graph_option(keyword(node, "options"))
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
    node_types=(cst.Call,),
    check=check,
    prefilter=r"compile",
    gate=refers_to("torch.compile"),
)
