"""TF019: `torch.save(model, path)` pickles the whole module, the checkpoint that does not travel.

The pickle records the model's class by import path and every tensor with the device it was
saved from, so loading needs the same code, `weights_only=False` (refused by default since
torch 2.6) and, for tensors saved on `neuron`, that device or a `map_location`. A state dict
loads anywhere. The rewrite is not safe (the loader must change too), so it is a suggestion.
"""

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

from torchferry.scan.model import Hit, Rule, Severity
from torchferry.scan.rewrite import positional

# Constructors that return a module wrapped around their first argument, or a new module.
WRAPPERS = {"torch.compile", "torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel",
            "torch.distributed.fsdp.FullyShardedDataParallel", "torch.nn.parallel.DataParallel"}
MODULE_METHODS = {"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "double", "requires_grad_"}
NOT_MODULE_WORDS = ("state", "dict", "ckpt", "checkpoint", "path", "param", "weight", "config", "name", "dir", "file")


def _name_says_module(name: str) -> bool:
    name = name.lower()
    if any(word in name for word in NOT_MODULE_WORDS):
        return False
    return name in ("self", "module", "net") or name.endswith(("model", "net", "_module", "encoder", "decoder", "unet"))


def _is_module(node: cst.BaseExpression, ctx) -> bool:
    if isinstance(node, cst.Name):
        if node.value == "self":
            return _enclosing_class(node, ctx) in ctx.regions.module_classes
        found, value = ctx.tensors.latest_binding(node)
        if found and value is not None:
            return _is_module(value, ctx)
        return not found and _name_says_module(node.value)
    if isinstance(node, cst.Attribute):
        return node.attr.value == "module" or _name_says_module(node.attr.value)
    if isinstance(node, cst.Call):
        qualname = ctx.qualname(node.func) or ""
        last = qualname.rsplit(".", 1)[-1]
        if qualname in WRAPPERS or last in ("DistributedDataParallel", "FullyShardedDataParallel"):
            return True
        if (qualname.startswith("torch.nn.") and last[:1].isupper()) or last in ctx.regions.module_classes:
            return True
        if last == "from_pretrained" and isinstance(node.func, cst.Attribute):
            owner = (get_full_name_for_node(node.func.value) or "").rsplit(".", 1)[-1]
            return "Model" in owner or "For" in owner
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in MODULE_METHODS:
            return _is_module(node.func.value, ctx)
    return False


def _enclosing_class(node: cst.CSTNode, ctx) -> str | None:
    current = ctx.parent(node)
    while current is not None and not isinstance(current, cst.ClassDef):
        current = ctx.parent(current)
    return current.name.value if current is not None else None


def _saved_modules(value: cst.BaseExpression, ctx) -> Iterator[cst.BaseExpression]:
    """The modules pickled by saving `value`: itself, or values of a dict literal."""
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if isinstance(element, cst.DictElement) and _is_module(element.value, ctx):
                yield element.value
    elif _is_module(value, ctx):
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
)
