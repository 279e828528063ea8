"""TF027: `torch.save(model.state_dict(), path)` of a model that lives on the accelerator, without `.cpu()`.

`torch.save` records every storage with the device it was saved from. A state dict of a model on
`neuron` gives a file whose storages are tagged `neuron:0`, and `torch.load(path)` on a machine
without that device fails ("don't know how to restore data location ... tagged with neuron:0")
unless every reader passes `map_location`. `ferry check` finds the same at run time (its exit
result, "loads only with map_location"). A dict comprehension that calls `.cpu()` is the fix
and is not reported. Reported only in a source that puts its model on a device: a `.to(x)`
other than `.to("cpu")` or a dtype, `.cuda()`, or a library that places it (transformers'
`Trainer`, accelerate's `Accelerator`); a script that loads and re-saves on the CPU is fine.
The rewrite is not made: a reader's `map_location` is an equal fix.
"""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import full_name, positional, refers_to
from torchferry.scan.tensors import argument_values
from torchferry.report.scan import Hit, Rule, Severity


def _state_dicts(value: ast.expr) -> Iterator[ast.Call]:
    """The `X.state_dict()` calls saved as they are: `value` itself, or values of a dict literal."""
    if isinstance(value, ast.Dict):
        for key, element in zip(value.keys, value.values):
            if key is not None:  # `**other` is no element of its own
                yield from _state_dicts(element)
    elif (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
          and value.func.attr == "state_dict" and not value.args and not value.keywords):
        yield value


PLACERS = ("transformers.Trainer", "transformers.Seq2SeqTrainer", "accelerate.Accelerator", "trl.SFTTrainer")
KEEPS_HOST = {"cpu", "torch.float32", "torch.float16", "torch.bfloat16", "torch.float64"}


def _places_on_device(call: ast.Call, ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "cuda":
        return True
    arguments = argument_values(call)
    if isinstance(func, ast.Attribute) and func.attr == "to" and arguments:
        first = arguments[0]
        literal = ctx.tree.string_literal(first)
        written = literal.value if literal is not None else ctx.qualname(first)
        return written not in KEEPS_HOST
    return (ctx.qualname(func) or "") in PLACERS


def _moves_to_device(ctx) -> bool:  # noqa: ANN001 - engine.AstContext
    """Whether the source puts anything on a device (found once per source)."""
    key = ("TF027 moves to a device",)
    if key not in ctx.memo:
        ctx.memo[key] = any(isinstance(n, ast.Call) and _places_on_device(n, ctx) for n in ctx.tree.nodes())
    return ctx.memo[key]


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) != "torch.save":
        return
    args = positional(node)
    if not args or not any(True for _ in _state_dicts(args[0])) or not _moves_to_device(ctx):
        return
    for call in _state_dicts(args[0]):
        owner = full_name(call.func.value) or "the model"
        yield Hit(call, message=(
            f"`torch.save({owner}.state_dict(), ...)` keeps each tensor's device: saved on the accelerator "
            "(`neuron` on TorchNeuron), the file's storages are tagged with it, and `torch.load` on a machine "
            "without that device fails unless it passes `map_location`."))


RULE = Rule(
    id="TF027",
    name="device-state-dict-save",
    severity=Severity.WARNING,
    summary="A state dict is saved straight from the model (`torch.save(model.state_dict(), path)`): on the "
    "accelerator its storages keep the device tag, and the file loads elsewhere only with `map_location`.",
    fix="`torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path)` (the same for optimizer state), "
    'or load with `torch.load(path, map_location="cpu")` everywhere',
    node_types=(ast.Call,),
    check=check,
    prefilter=r"state_dict",
    gate=refers_to("torch.save"),
)
