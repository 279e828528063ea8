"""TF023: TorchScript (`torch.jit.script` / `torch.jit.trace`) on the path to the target.

TorchNeuron compiles graphs only through `torch.compile(backend="neuron")`; a TorchScript
module is run op by op by the TorchScript interpreter, each op an eager device kernel, so
none of the graph compilation it buys on CUDA (fusion) happens. PyTorch 2.13 also deprecates
both calls (they warn: "switch to `torch.compile` or `torch.export`").
"""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity

NAMES = {"torch.jit.script", "torch.jit.trace", "torch.jit.trace_module", "torch.jit.script_method"}


def check(node: ast.Name | ast.Attribute, ctx) -> Iterator[Hit]:
    if not ctx.is_outermost(node):
        return
    name = ctx.qualname(node)
    if name not in NAMES:
        return
    yield Hit(node, message=(
        f"`{name}` makes a TorchScript module, which TorchNeuron runs op by op: it compiles graphs only through "
        "torch.compile(backend='neuron') (TorchNeuron docs, about-torch-compile); PyTorch 2.13 deprecates it."))


RULE = Rule(
    id="TF023",
    name="torchscript",
    severity=Severity.WARNING,
    summary="`torch.jit.script` / `torch.jit.trace` make a TorchScript module, which TorchNeuron runs op by op "
    "(no graph compilation); both are deprecated.",
    fix="`torch.compile(model)` for speed, `torch.export.export(model, args)` for a portable graph",
    node_types=(ast.Name, ast.Attribute),
    check=check,
    prefilter=r"jit",
    gate=refers_to(*NAMES),
)
