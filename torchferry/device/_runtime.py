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
from pathlib import Path
from types import ModuleType

from torchferry.device import _settings, target
from torchferry.device.profile import DEFAULT_PROFILE, DeviceProfile, expand, load_profile

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

    import torch

    from torchferry.device import _C as native

    source = _settings.device_memory_source(environ, chosen.name, chosen.sources.get("hbm", chosen.description))
    native._init(count, capacity, source, caching, backward_on_caller)
    atexit.register(native._release_autograd_workers)
    native._register_cpu_kernels(cpu_kernel_ops(torch))
    native._register_native_composites(native_composite_ops(torch, chosen))
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


def native_composite_ops(torch: ModuleType, chosen: DeviceProfile) -> list[str]:
    """Ops the target registers natively that PyTorch decomposes before a backend sees them
    (CompositeImplicitAutograd, no CPU or device kernel of their own: `linear`, `rms_norm`,
    `one_hot`, ...). TorchNeuron's registration takes precedence over the composite there, so
    the device counts each as the op itself, not as its parts (a part may be an op the
    target does not implement: a false host fallback). `contiguous` has a kernel of its own.
    """
    if chosen.native_ops is None:
        return []
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = {name for op in chosen.native_ops.native for name in expand(op)}
    return sorted(
        name.removeprefix("aten::") for name in names
        if has(name, "CompositeImplicitAutograd") and not has(name, "CPU") and not has(name, "PrivateUse1")
        and not has(name, "AutogradPrivateUse1")
    )


_COMPOSITE_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
)


def set_fallback_mode(mode: str) -> None:
    """Change TORCHFERRY_FALLBACK's effect at run time (tests, the decision test)."""
    target.configure(core(), profile(), _settings.check_fallback_mode(mode, "fallback mode"))
