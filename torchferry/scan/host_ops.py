"""The device profile's data-dependent ops, as the Python calls a rule can see in source.

The op list is the built-in device's profile (`torchferry.device.profile`, its
`[[host_fallback]]` entries), and so is where each runs on the target: an entry in
`fallback_reasons()` runs on the host; an entry the target implements runs on the device
and reads its output size on the host. So the scan and the rehearsal never disagree: an
op the profile drops is no longer reported, and a data-dependent op it adds must get a
spelling here (tests/scan/test_host_ops.py fails until it has one). This module holds
only the mapping the profile cannot: ATen op name -> the Python calls that run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import ast

from torchferry.device.profile import DEFAULT_PROFILE, HostFallback, load_profile
from torchferry.scan.syntax import keyword, positional
from torchferry.scan.tensors import is_dotted_name

Condition = Callable[[ast.Call, object, bool], bool]  # (call, ctx, written as a method) -> the op runs


def _repeats_is_tensor(call: ast.Call, ctx, method: bool) -> bool:  # noqa: ANN001 - engine.AstContext
    """`repeat_interleave(repeats)` runs the `.Tensor` overload only when `repeats` is a tensor."""
    args = positional(call)
    if not method and len(args) == 1:
        return True  # torch.repeat_interleave(repeats): repeats is the tensor
    given = keyword(call, "repeats")
    index = 0 if method else 1
    repeats = given.value if given is not None else (args[index] if len(args) > index else None)
    return repeats is not None and ctx.tensors.is_tensor(repeats)


def _condition_only(call: ast.Call, ctx, method: bool) -> bool:  # noqa: ANN001, ARG001
    """`torch.where(condition)` (no x, y) is `nonzero(condition, as_tuple=True)`."""
    return len(call.args) + len(call.keywords) == 1


def _without_dim(call: ast.Call, ctx, method: bool) -> bool:  # noqa: ANN001, ARG001
    return keyword(call, "dim") is None


def _with_dim(call: ast.Call, ctx, method: bool) -> bool:  # noqa: ANN001, ARG001
    return keyword(call, "dim") is not None


def _num_classes_inferred(call: ast.Call, ctx, method: bool) -> bool:  # noqa: ANN001, ARG001
    """`F.one_hot(i)` (or num_classes=-1): the output's width is the indices' largest value, read on the host. With
    num_classes given the shape is static (TorchNeuron still reads the range, which the rehearsal counts)."""
    given = keyword(call, "num_classes")
    value = given.value if given is not None else (call.args[1] if len(call.args) > 1 else None)
    return value is None or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub)
                             and isinstance(value.operand, ast.Constant) and value.operand.value == 1)


@dataclass(frozen=True)
class Spelling:
    """How one ATen op is written in Python, each spelling with the condition under which it runs the op."""

    functions: dict[str, Condition | None]  # qualified name -> condition (None: always)
    methods: dict[str, Condition | None]  # Tensor method name -> condition
    # `t[mask]` with a boolean mask runs this op on TorchNeuron: its index kernels turn boolean
    # indices into integer ones with torch.nonzero (torch-neuronx python_ops/torch_mlir/ops/indexing.py,
    # `convert_indices`); writing a scalar through a mask becomes a masked_fill instead (jax/ops/index_put.py).
    boolean_index: bool = False


SPELLINGS: dict[str, Spelling] = {
    "aten::nonzero": Spelling(functions={"torch.nonzero": None, "torch.argwhere": None, "torch.where": _condition_only},
                              methods={"nonzero": None, "argwhere": None}, boolean_index=True),
    "aten::masked_select": Spelling(functions={"torch.masked_select": None}, methods={"masked_select": None}),
    "aten::_unique2": Spelling(functions={"torch.unique": _without_dim}, methods={"unique": _without_dim}),
    "aten::unique_dim": Spelling(functions={"torch.unique": _with_dim}, methods={"unique": _with_dim}),
    "aten::unique_consecutive": Spelling(functions={"torch.unique_consecutive": None},
                                         methods={"unique_consecutive": None}),
    "aten::bincount": Spelling(functions={"torch.bincount": None}, methods={"bincount": None}),
    "aten::one_hot": Spelling(functions={"torch.nn.functional.one_hot": _num_classes_inferred}, methods={}),
    "aten::repeat_interleave.Tensor": Spelling(functions={"torch.repeat_interleave": _repeats_is_tensor},
                                               methods={"repeat_interleave": _repeats_is_tensor}),
}


@dataclass(frozen=True)
class HostOp:
    """One data-dependent entry of the profile, with its Python spelling and where the target runs it."""

    entry: HostFallback
    spelling: Spelling
    profile: str
    on_host: bool  # True: the target runs it on the host; False: on the device, reading its size on the host

    def cite(self) -> str:
        """Where the fact comes from: the profile entry (its reason and sources are in the profile)."""
        return f"{self.profile} device profile, host_fallback {self.entry.op}"

    def effect(self) -> str:
        """What the target does with the op, in a few words."""
        if self.on_host:
            return f"TorchNeuron runs {self.entry.op} on the host (a sync and two copies per call)"
        return (f"TorchNeuron runs {self.entry.op} at the input's full size and reads the output size on the "
                "host (a sync per call)")


# Every name any spelling uses: a call with another name is no candidate, and the profile
# (which imports torch to check its op names) is not even loaded for it.
_NAMES = frozenset(n for s in SPELLINGS.values() for names in (s.functions, s.methods) for n in names)


@cache
def host_ops(profile: str = DEFAULT_PROFILE) -> tuple[HostOp, ...]:
    """The profile's data-dependent entries that have a Python spelling, in profile order."""
    loaded = load_profile(profile)
    on_host = loaded.fallback_reasons()
    return tuple(HostOp(e, SPELLINGS[e.op], loaded.name, e.op in on_host)
                 for e in loaded.host_fallback if e.op in SPELLINGS)


def profile_source(key: str, profile: str = DEFAULT_PROFILE) -> str:
    """The address of source `key` in the profile's [sources] (its first word), or a pointer to the profile."""
    text = load_profile(profile).sources.get(key)
    return text.split(" ", 1)[0] if text else f"{profile} device profile"


def matching_call(call: ast.Call, ctx) -> tuple[HostOp, str] | None:  # noqa: ANN001 - engine.AstContext
    """The host op `call` runs, with the call as written (`torch.unique`, `.nonzero()`), or None."""
    qualname = ctx.qualname(call.func) or ""
    # `torch.f(...)` is a function; `x.f(...)` and `torch.g(a).f(...)` (qualname "torch.g.f") are methods
    is_method = isinstance(call.func, ast.Attribute) and not (qualname.startswith("torch.")
                                                              and is_dotted_name(call.func.value))
    name = call.func.attr if is_method else qualname
    if name not in _NAMES:
        return None
    for op in host_ops():
        spellings = op.spelling.methods if is_method else op.spelling.functions
        if name in spellings and (spellings[name] is None or spellings[name](call, ctx, is_method)):
            return op, f".{name}()" if is_method else name
    return None


def boolean_index_op() -> HostOp | None:
    """The host op that indexing with a boolean mask (`t[mask]`) runs on the target, if the profile lists it."""
    return next((op for op in host_ops() if op.spelling.boolean_index), None)
