"""Streams and events of the built-in device.

Kernels run synchronously, so `synchronize()` returns at once and streams order
nothing; events read the host clock when recorded, so `elapsed_time` is real time.
The classes are PyTorch's generic `torch.Stream`/`torch.Event` bound to `neuron`.
`Tensor.record_stream(s)` is a registered device op (Guard.cpp): it checks that the
tensor and the stream are neuron's and hands the block to the guard, which has nothing
to defer because every kernel on the block has already finished.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import torch

from torchferry.device.neuron._devices import _index


def _device(device: Any = None) -> torch.device:
    return torch.device("neuron", _index(device))


class Stream:
    """`torch_neuronx.Stream(device=None, priority=0, **kwargs)`: a `torch.Stream` on a neuron device;
    with `stream_id`, `device_index` and `device_type` keywords, the existing stream they name.

    It returns PyTorch's own `torch.Stream`, because PyTorch's stream and event
    methods accept only that exact type.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> torch.Stream:  # type: ignore[misc]
        if {"stream_id", "device_index", "device_type"} <= kwargs.keys():
            return torch.Stream(stream_id=kwargs["stream_id"], device_index=kwargs["device_index"],
                                device_type=kwargs["device_type"])
        return torch.Stream(device=_device(device), priority=priority)


class Event:
    """`torch_neuronx.Event(enable_timing=False, blocking=False)`: a `torch.Event` on the current neuron device."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False) -> torch.Event:  # type: ignore[misc]
        return torch.Event(device=_device(), enable_timing=enable_timing, blocking=blocking)


def new_stream(**kwargs: Any) -> torch.Stream:
    """`torch.neuron.Stream(**kwargs)`: TorchNeuron's is a function that takes keywords only
    (`device`, `priority`), not the class."""
    return Stream(**kwargs)


def new_event(enable_timing: bool = False, blocking: bool = False) -> torch.Event:
    """`torch.neuron.Event(enable_timing=False, blocking=False)`, a function as in TorchNeuron."""
    return Event(enable_timing=enable_timing, blocking=blocking)


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


class StreamContext:
    """Makes `stream` current on its device for the `with` block (None: does nothing),
    like `torch.cuda.StreamContext`; the previous stream comes back on exit."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self._previous = torch.accelerator.current_stream(self.stream.device)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._previous is not None:
            torch.accelerator.set_stream(self._previous)
            self._previous = None


def stream(stream: torch.Stream | None) -> StreamContext:
    """`with torch.neuron.stream(s):` runs the block with `s` as the current stream."""
    return StreamContext(stream)


def wait_stream(stream: torch.Stream) -> None:
    """Make the current stream wait for `stream` (kernels run synchronously: nothing to wait for)."""
    current_stream().wait_stream(stream)


def wait_event(event: torch.Event) -> None:
    """Make the current stream wait for `event`."""
    current_stream().wait_event(event)


def record_event(event: torch.Event | None = None) -> torch.Event:
    """Record `event` (None: a new one) on the current stream and return it."""
    return current_stream().record_event(event)


def query() -> bool:
    """Whether all work on the current stream has finished (always, here: kernels run synchronously)."""
    return current_stream().query()
