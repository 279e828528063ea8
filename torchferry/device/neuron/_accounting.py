"""Op accounting like TorchNeuron's: which ops ran on the device and which on the host."""

from __future__ import annotations

from torchferry.device import _runtime


def get_executed_ops() -> dict[str, int]:
    """ATen ops that ran on the device since the last `clear_op_tracking()`, with counts."""
    return dict(sorted(_runtime.core()._executed_ops().items()))


def get_fallback_ops() -> dict[str, int]:
    """Ops that ran on the host CPU on the target, with counts: the profile's host fallbacks
    and the ops the target does not implement (predicted fallbacks; see
    torchferry.device.profile). Their reasons: torchferry.device.target.fallback_reasons()."""
    return dict(sorted(_runtime.core()._fallback_ops().items()))


def clear_op_tracking() -> None:
    _runtime.core()._clear_op_tracking()
