"""Devices of the built-in device: count, current device, properties (`torch.cuda`'s names)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from torchferry.device import _runtime

_device_t = torch.device | str | int | None


def _index(device: _device_t = None) -> int:
    """Device index of `device` (None: the current device), checked against the count."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        parsed = torch.device(device)
        if parsed.type != "neuron":
            raise ValueError(f"expected a neuron device, got {parsed}")
        index = current_device() if parsed.index is None else parsed.index
    if not 0 <= index < device_count():
        raise ValueError(
            f"invalid neuron device {index}: this process sees {device_count()} device(s) "
            f"(valid: 0..{device_count() - 1}); NEURON_RT_VISIBLE_CORES sets the count"
        )
    return index


def is_available() -> bool:
    return _runtime._C is not None and device_count() > 0


def is_initialized() -> bool:
    return _runtime._C is not None


is_neuron_runtime_initialized = is_initialized


def _is_in_bad_fork() -> bool:
    # Host memory survives fork(), so a forked child may use the device.
    return False


def init() -> None:
    _runtime.core()


def device_count() -> int:
    return _runtime.core()._device_count()


def current_device() -> int:
    return _runtime.core()._current_device()


def set_device(device: _device_t) -> None:
    _runtime.core()._set_device(_index(device))


@contextmanager
def device(device_spec: _device_t) -> Iterator[None]:
    """Context manager that makes `device_spec` current, like `torch.cuda.device`."""
    previous = current_device()
    set_device(device_spec)
    try:
        yield
    finally:
        _runtime.core()._set_device(previous)


@dataclass(frozen=True)
class _NeuronDeviceProperties:
    name: str
    total_memory: int
    profile: str
    is_host_emulation: bool = True


def get_device_properties(device: _device_t = None) -> _NeuronDeviceProperties:
    index = _index(device)
    profile = _runtime.profile()
    return _NeuronDeviceProperties(
        name=f"torchferry neuron ({profile.name}, host rehearsal)",
        total_memory=_runtime.core()._memory_stats(index)["capacity_bytes"],
        profile=profile.name,
    )


def get_device_name(device: _device_t = 0) -> str:
    return get_device_properties(device).name


def get_amp_supported_dtype() -> list[torch.dtype]:
    """TorchNeuron's list (torch_neuronx/neuron.py), float32 included."""
    return [torch.float32, torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True

