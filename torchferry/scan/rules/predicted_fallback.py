"""TF028: a call in a forward or a training step whose op the target runs on the host.

Which ops fall back is not listed here: the call's ATen op (`torch.X`, `torch.nn.functional.X`,
`tensor.X()` -> `aten::X`; `torch.linalg.X` -> `aten::linalg_X`, and likewise `special`, `fft`)
is looked up in the device profile with the same classification the built-in device hands its
C++ core (`DeviceProfile.host_reason`, from `profiles/trn2_ops.toml`), so the scan and the
device's host-fallback count never disagree, and a profile that gains a native op stops the
report. Only ops that reach a device as themselves are judged: an op with a composite kernel
(`F.dropout`, `torch.zeros`) becomes other ops first, which the scan cannot see (the device
does: `ferry check`). A method counts only on an expression that holds a tensor. The
data-dependent ops are TF020's and are not reported twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import ast

from torchferry.scan.regions import REGION_WORDS
from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.host_ops import SPELLINGS
from torchferry.scan.tensors import is_dotted_name

# torch namespace -> the prefix of its ATen op names
NAMESPACES = {"torch": "", "torch.nn.functional": "", "torch.linalg": "linalg_", "torch.special": "special_",
              "torch.fft": "fft_"}
# kernels that make an op run as other ops (it never reaches a backend as itself)
COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@cache
def _host_reason(op: str) -> tuple[str, str] | None:
    """(overload, reason) when every overload of ``op`` that reaches a backend runs on the target's host."""
    import torch

    from torchferry.device.profile import expand

    if any(op == o or o.startswith(op + ".") for o in SPELLINGS):
        return None
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    overloads = _overloads().get(op, []) if "." not in op.removeprefix("aten::") else expand(op)
    reaching = [o for o in overloads if has(o, "CPU") and not any(has(o, k) for k in COMPOSITE_KEYS)]
    profile = _profile()
    reasons = [(o, profile.host_reason(o)) for o in reaching]
    if not reasons or any(reason is None for _, reason in reasons):
        return None
    functional = [r for r in reasons if not r[0].endswith(("out", "_out"))]  # the overload users call, when named
    return (functional or reasons)[0]  # type: ignore[return-value]


@cache
def _overloads() -> dict[str, list[str]]:
    """Each ATen op name -> its overloads, sorted (what `expand` finds, indexed once, not searched per op)."""
    from torchferry.device.profile import aten_ops

    found: dict[str, list[str]] = {}
    for name in sorted(aten_ops()):
        found.setdefault(name.split(".", 1)[0], []).append(name)
    return found


@cache
def _profile():  # noqa: ANN202 - a DeviceProfile, imported on first use (it imports torch)
    from torchferry.device.profile import DEFAULT_PROFILE, load_profile

    return load_profile(DEFAULT_PROFILE)


def _aten_name(call: ast.Call, ctx) -> tuple[str, str] | None:
    """(`aten::name`, the call as written) for a torch function or a tensor method, else None."""
    func = call.func
    qualname = ctx.qualname(func) or ""
    namespace, _, name = qualname.rpartition(".")
    if namespace in NAMESPACES and not name.startswith("_"):
        return f"aten::{NAMESPACES[namespace]}{name}", qualname
    if (isinstance(func, ast.Attribute) and not func.attr.startswith("_")
            and not (qualname.startswith("torch.") and is_dotted_name(func.value))
            and ctx.tensors.is_tensor(func.value)):
        return f"aten::{func.attr}", f".{func.attr}()"
    return None


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    region = ctx.regions.region(node)
    if region is None:
        return
    named = _aten_name(node, ctx)
    if named is None:
        return
    found = _host_reason(named[0])
    if found is None:
        return
    op, reason = found
    profile = _profile()
    table = profile.native_ops.path.name if profile.native_ops else "no native-op table"
    yield Hit(node.func, message=(
        f"`{named[1]}` in a {region} runs {op}, which the target runs on the host: {reason}. Each call copies its "
        f"inputs to the host and the result back, every step [{profile.name} device profile, {table}]."))


RULE = Rule(
    id="TF028",
    name="predicted-host-fallback",
    severity=Severity.WARNING,
    summary="A call in a forward or training step runs an op that the device profile predicts the target runs "
    "on the host (no device kernel in TorchNeuron): two copies per call, every step.",
    fix="use an op the target implements (the profile's native table, `torchferry/device/profiles/trn2_ops.toml`), "
    "move the call out of the step, or measure its share with `ferry check`",
    node_types=(ast.Call,),
    check=check,
    prefilter=REGION_WORDS,
)
