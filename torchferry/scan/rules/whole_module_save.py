"""TF019: `torch.save(model, path)` pickles the whole module, the checkpoint that does not travel.

The pickle records the model's class by import path and every tensor with the device it was
saved from, so loading needs the same code, `weights_only=False` (refused by default since
torch 2.6) and, for tensors saved on `neuron`, that device or a `map_location`. A state dict
loads anywhere. The rewrite is not safe (the loader must change too), so it is a suggestion.
"""

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import positional


def _saved_modules(value: cst.BaseExpression, ctx) -> Iterator[cst.BaseExpression]:
    """The modules pickled by saving `value`: itself, or values of a dict literal."""
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if isinstance(element, cst.DictElement) and ctx.tensors.is_module(element.value):
                yield element.value
    elif ctx.tensors.is_module(value):
        yield value


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.save":
        return
    args = positional(node)
    if not args:
        return
    for module in _saved_modules(args[0].value, ctx):
        shown = get_full_name_for_node(module) or "the module"
        yield Hit(module, message=(
            f"`torch.save({shown}, ...)` pickles the whole module: loading needs this code at the same import "
            "path and `weights_only=False` (torch.load's default is True since PyTorch 2.6), and the tensors come "
            "back on the device they were saved from (`neuron` on TorchNeuron). Save the state dict instead."))


RULE = Rule(
    id="TF019",
    name="whole-module-save",
    severity=Severity.WARNING,
    summary="`torch.save(model, path)` pickles the whole module: the checkpoint does not load elsewhere "
    "without this code and `weights_only=False`.",
    fix='`torch.save(model.state_dict(), path)`; load with `model.load_state_dict(torch.load(path, '
    'map_location="cpu"))` (not rewritten: the loader changes too)',
    node_types=(cst.Call,),
    check=check,
    prefilter=r"save",
)
