"""`torch_neuronx.NeuronProfiler` over the built-in device: the PyTorch half only.

The real `NeuronProfiler` (torch-neuronx `torch_neuronx/profiling.py`) drives two
profilers: the Neuron runtime's (system and device traces, `framework_mapping_*.json`,
filtered by `event_filters`) in `neuron_output_dir`, and `torch.profiler` for
`pytorch_activities`, exported to `<neuron_output_dir>/<pytorch_trace_file>`
(default `pytorch_trace.json`). The host has no Neuron runtime, so only the PyTorch
trace is written; its device track comes from the built-in device's profiler
(`ProfilerActivity.PrivateUse1`, see docs/device/ecosystem.md). Same signature,
same file layout, same errors for misuse.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

import torch.profiler


class NeuronProfiler:
    """Context manager: `with NeuronProfiler(pytorch_activities=[...]) as prof: ...`."""

    def __init__(
        self,
        pytorch_activities: list[torch.profiler.ProfilerActivity] | None = None,
        record_shapes: bool = False,
        pytorch_trace_file: str | None = None,
        neuron_output_dir: str = "./output",
        event_filters: dict[str, list[Any]] | None = None,
    ) -> None:
        self.pytorch_activities = list(pytorch_activities or [])
        self.record_shapes = record_shapes
        self.neuron_output_dir = neuron_output_dir
        self.pytorch_trace_file = (
            os.path.join(neuron_output_dir, pytorch_trace_file or "pytorch_trace.json")
            if self.pytorch_activities else None
        )
        # Filters select Neuron runtime events; the host writes none (module docstring).
        self.event_filters = event_filters
        self._profiler: torch.profiler.profile | None = None
        self._active = False

    def start(self) -> None:
        if self._active:
            raise RuntimeError("Profiler is already active")
        if self.pytorch_activities:
            self._profiler = torch.profiler.profile(activities=self.pytorch_activities,
                                                    record_shapes=self.record_shapes)
            self._profiler.__enter__()
        self._active = True

    def stop(self) -> None:
        if not self._active:
            raise RuntimeError("Profiler is not active")
        self._active = False
        if self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            os.makedirs(self.neuron_output_dir, exist_ok=True)
            self._profiler.export_chrome_trace(self.pytorch_trace_file)

    def __enter__(self) -> NeuronProfiler:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        self.stop()
        return False

    def is_active(self) -> bool:
        return self._active

    def has_pytorch_profiling(self) -> bool:
        return bool(self.pytorch_activities)

    def get_pytorch_trace(self) -> str | None:
        """`str()` of the PyTorch profiler once stopped, as the real one returns (None before)."""
        if self._profiler is not None and not self._active:
            return str(self._profiler)
        return None

    def get_nrt_output_directory(self) -> str:
        return self.neuron_output_dir

    def export_pytorch_trace(self, filename: str) -> None:
        if self._profiler is None:
            raise ValueError("PyTorch profiling not enabled or not started")
        if self._active:
            raise ValueError("Cannot export trace while profiling is active")
        self._profiler.export_chrome_trace(filename)


__all__ = ["NeuronProfiler"]
