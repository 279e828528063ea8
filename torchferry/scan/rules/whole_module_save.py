"""TF019: `torch.save(model, path)` pickles the whole module, the checkpoint that does not travel.

The pickle records the model's class by import path and every tensor with the device it was
saved from, so loading needs the same code, `weights_only=False` (refused by default since
torch 2.6) and, for tensors saved on `neuron`, that device or a `map_location`. A state dict
loads anywhere. The rewrite is not safe (the loader must change too), so it is a suggestion.
"""

from collections.abc import Iterator

import ast

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import full_name
from torchferry.scan.syntax import positional


def _saved_modules(value: ast.AST, ctx) -> Iterator[ast.AST]:
    """The modules pickled by saving `value`: itself, or values of a dict literal."""
    if isinstance(value, ast.Dict):
        for key, element in zip(value.keys, value.values):
            if key is not None and ctx.tensors.is_module(element):  # key None: `**other`
                yield element
    elif ctx.tensors.is_module(value):
        yield value


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.save":
        return
    args = positional(node)
    if not args:
        return
    for module in _saved_modules(args[0], ctx):
        shown = full_name(module) or "the module"
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
    node_types=(ast.Call,),
    check=check,
    prefilter=r"save",
)
