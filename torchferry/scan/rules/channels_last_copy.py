"""TF029: a channels-last copy made with `.to(memory_format=...)` or `.contiguous(memory_format=...)`.

TorchNeuron validates the memory format before it makes either copy and accepts contiguous and
preserve only (python_ops/cast_policy.py, `validate_neuron_memory_format`): its `_to_copy`
(python_ops/to_copy.py) checks whenever the device is either end, a move from the CPU included, and
its `contiguous` (python_ops/contiguous.py) checks every device tensor. Its build falls back to the
CPU only for ops it does not implement (_build_config.py, set by torch_neuronx/__init__.py), so the
error reaches the script: its CI lists DDP's test_channels_last_contig as failing with it
(tests/pytorch_tests/specs/ddp_spec.json). The same calls work on CUDA and on a CPU tensor, so the
scan cannot tell where the tensor lives: a warning. Allocating and cloning in channels_last stay
allowed there. The built-in device refuses the same calls (the profile's `memory_format` rule).
"""

import ast
from collections.abc import Iterator

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import keyword, positional, refers_to

FORMATS = ("torch.channels_last", "torch.channels_last_3d")
# method -> the TorchNeuron op that refuses the format
METHODS = {"to": "_to_copy", "contiguous": "contiguous"}


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in METHODS:
        return
    named = keyword(node, "memory_format")
    value = named.value if named is not None else None
    if value is None and func.attr == "contiguous" and positional(node):
        value = positional(node)[0]
    fmt = ctx.qualname(value) if value is not None else None
    if fmt not in FORMATS:
        return
    yield Hit(node, message=(
        f"`.{func.attr}(memory_format={fmt})`: TorchNeuron's `{METHODS[func.attr]}` accepts contiguous and preserve "
        "formats only" + (" whenever the device is either end (a move to it included)" if func.attr == "to" else
                          " for a tensor on the device") + ", and its build does not fall back to the CPU."))


RULE = Rule(
    id="TF029",
    name="channels-last-copy",
    severity=Severity.WARNING,
    summary="A channels-last copy is made with `.to(memory_format=...)` or `.contiguous(memory_format=...)`; "
    "TorchNeuron refuses both for device tensors (and `.to` for a move to the device).",
    fix="keep the default memory format on the device, or make the copy there with "
    "`x.clone(memory_format=torch.channels_last)`, which TorchNeuron allows",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"channels_last",
    gate=refers_to(*FORMATS),
)
