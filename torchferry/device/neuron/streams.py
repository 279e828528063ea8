"""Streams and events of the built-in device.

Kernels run synchronously, so `synchronize()` returns at once and streams order
nothing; events read the host clock when recorded, so `elapsed_time` is real time.
The classes are PyTorch's generic `torch.Stream`/`torch.Event` bound to `neuron`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch


def _device(device: Any = None) -> torch.device:
    from torchferry.device.neuron import _index

    return torch.device("neuron", _index(device))


class Stream:
    """`torch.neuron.Stream(device=None, priority=0)`: a `torch.Stream` on a neuron device.

    It returns PyTorch's own `torch.Stream`, because PyTorch's stream and event
    methods accept only that exact type.
    """

    def __new__(cls, device: Any = None, priority: int = 0) -> torch.Stream:  # type: ignore[misc]
        return torch.Stream(device=_device(device), priority=priority)


class Event:
    """`torch.neuron.Event(enable_timing=True, ...)`: a `torch.Event` on the current neuron device."""

    def __new__(cls, enable_timing: bool = True, blocking: bool = False,  # type: ignore[misc]
                interprocess: bool = False) -> torch.Event:
        return torch.Event(device=_device(), enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def synchronize(device: Any = None) -> None:
    torch.accelerator.synchronize(_device(device))


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device(device))


def default_stream(device: Any = None) -> torch.Stream:
    """Stream 0 of the device: the one every op runs on unless another is set."""
    dev = _device(device)
    current = torch.accelerator.current_stream(dev)
    return torch.Stream(stream_id=0, device_index=dev.index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    if stream is None:
        yield
        return
    previous = torch.accelerator.current_stream(stream.device)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)
