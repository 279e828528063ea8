"""The handle to the built-in device's C++ core: load it, start it, hand it out.

Everything in the device package reaches the core through `core()` and `profile()`; this
module imports nothing of theirs, so there is no import circle. Registering the device with
PyTorch (the name, `torch.neuron`, the compile and distributed backends) is the wiring
`torchferry.device.enable()` does after `start()`. Kept apart from `torchferry.device`
so that importing the package loads no C++.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from torchferry.device import _settings, target
from torchferry.device.profile import DEFAULT_PROFILE, DeviceProfile, aten_ops, load_profile

_C: ModuleType | None = None
_profile: DeviceProfile | None = None


def core() -> ModuleType:
    """The loaded C++ core; the device module calls this, so it works only once enabled."""
    if _C is None:
        raise RuntimeError(
            "torchferry's neuron device is not enabled in this process. Call "
            "torchferry.device.enable() first, or set TORCHFERRY_DEVICE=neuron before `import torch`."
        )
    return _C


def profile() -> DeviceProfile:
    core()
    assert _profile is not None
    return _profile


def start(profile_name: str | Path | None) -> None:
    """Load the C++ core and start it: devices, memory, CPU kernels, host fallbacks.

    Settings are read (and rejected when malformed) before anything is registered.
    """
    global _C, _profile
    environ = os.environ
    chosen = load_profile(profile_name or environ.get("TORCHFERRY_PROFILE") or DEFAULT_PROFILE)
    count = _settings.visible_device_count(environ)
    capacity = _settings.device_memory(environ, chosen.memory_bytes)
    mode = _settings.fallback_mode(environ)
    numerics = _settings.numerics(environ, chosen.numerics)
    caching = _settings.memory_caching(environ)
    backward_on_caller = _settings.backward_thread(environ) == "caller"
    host_stream = _settings.random_stream(environ) == "host"

    import torch

    from torchferry.device import _C as native

    source = _settings.device_memory_source(environ, chosen.name, chosen.sources.get("hbm", chosen.description))
    native._use_host_stream(host_stream)
    native._init(count, capacity, source, caching, backward_on_caller)
    atexit.register(native._release_autograd_workers)
    native._register_cpu_kernels(cpu_kernel_ops(torch))
    composites = native_composite_ops(torch, chosen)
    native._register_native_composites(list(composites.implicit), list(composites.explicit),
                                       list(composites.device_argument))
    target.configure(native, chosen, mode, numerics)
    target.start(native, chosen, environ)
    _C, _profile = native, chosen


def cpu_kernel_ops(torch: ModuleType) -> list[str]:
    """aten ops with a CPU kernel of their own that PrivateUse1 would otherwise run through
    a composite (a decomposition, or `empty` + the `out=` variant).

    Running the CPU's own kernel keeps the device's numbers the CPU's (e.g.
    `silu_backward`, `native_layer_norm`) and saves a dispatch per op.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not has(name, "CPU") or has(name, "PrivateUse1"):
            continue
        if any(has(name, key) for key in _COMPOSITE_KEYS):
            names.append(name.removeprefix("aten::"))
    return sorted(names)


@dataclass(frozen=True, kw_only=True)
class NativeComposites:
    """The ops of `native_composite_ops`, by the kind of composite PyTorch implements them as."""

    implicit: tuple[str, ...] = ()  # CompositeImplicitAutograd: registered above and below autograd
    explicit: tuple[str, ...] = ()  # CompositeExplicitAutograd: registered below autograd only
    device_argument: tuple[str, ...] = ()  # the same, but with a `device=` that may name another device


def native_composite_ops(torch: ModuleType, chosen: DeviceProfile) -> NativeComposites:
    """Ops the target registers natively that PyTorch implements as composites, with no CPU or
    device kernel of their own. TorchNeuron registers each op it implements at PrivateUse1
    (`aten_lib.impl(name, wrapper, "PrivateUse1")`: python_ops/auto_registration.py,
    python_ops/torch_mlir/operation_registry.py), and a backend's kernel takes precedence over
    the composite there, so the target runs each as one op; the device counts it as that op,
    not as its parts (a part may be an op the target does not implement: a false host
    fallback). The table's names are exact overloads: its `aten::max` is `max(Tensor)`, not
    `max.other`, which PyTorch decomposes into `maximum` on the target too.

    - implicit (CompositeImplicitAutograd: `linear`, `rms_norm`, `one_hot`, ...): PyTorch
      decomposes them above autograd, so the device takes them there as well (the composite's
      parts still record autograd) and below it (inference mode). `contiguous` has a kernel
      of its own.
    - explicit (CompositeExplicitAutograd: every `_foreach_*`, `clone`, `zeros`, `embedding`,
      ...): PyTorch's autograd formula stays theirs, as TorchNeuron registers no autograd
      kernel for them; below it the op runs whole on host views, as any op without a kernel.
      Left to their composites: the transfers (`copy_`, `_to_copy`), which end in this device's own
      copy kernels.
    - device_argument: the explicit ones that take a `device=` beside a tensor (`ones_like`, `new_empty`):
      run whole as the others unless `device=` names another device, where the composite makes the
      result there (a `ones_like` of a permuted tensor is then TorchNeuron's fresh row-major result, not
      `empty_like` + an in-place `fill_` into the permuted tensor, which compiled_strided_writes_fail refuses).
    """
    if chosen.native_ops is None:
        return NativeComposites()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    unregistered = [
        name for name in sorted(chosen.native_ops.native)
        if name in aten_ops() and not has(name, "CPU") and not has(name, "PrivateUse1")
        and not has(name, "AutogradPrivateUse1")
    ]
    explicit = [name for name in unregistered if has(name, "CompositeExplicitAutograd") and name not in _MOVES]
    return NativeComposites(
        implicit=tuple(name.removeprefix("aten::") for name in unregistered
                       if has(name, "CompositeImplicitAutograd")),
        explicit=tuple(name.removeprefix("aten::") for name in explicit if not _takes_a_device(torch, name)),
        device_argument=tuple(name.removeprefix("aten::") for name in explicit if _takes_a_device(torch, name)),
    )


def _takes_a_device(torch: ModuleType, name: str) -> bool:
    """Whether an op takes a device beside a tensor, so its result may lie on another device than its
    device tensors (`new_empty`, `ones_like`)."""
    op, _, overload = name.partition(".")
    types = [str(argument.type) for argument in torch._C._get_schema(op, overload).arguments]
    return any("Device" in t for t in types) and any("Tensor" in t for t in types)


# The composites that move data between devices: they end in this device's own copy kernels.
_MOVES = frozenset({"aten::copy_", "aten::_to_copy"})

_COMPOSITE_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
)


def set_fallback_mode(mode: str) -> None:
    """Change TORCHFERRY_FALLBACK's effect at run time (tests, the decision test)."""
    target.configure(core(), profile(), _settings.check_fallback_mode(mode, "fallback mode"))
