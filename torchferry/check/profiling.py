"""`ferry check --profile`: one torch.profiler Chrome trace per device, over a few steps after the timed ones.

The traced steps come after the steady-state rounds, so the profiler's overhead is in no
timed figure. Activities: the CPU, plus the device's own activity where torch.profiler
supports one: ``ProfilerActivity.PrivateUse1`` for the registered PrivateUse1 backend
(torchferry's built-in device records one kernel event per op there, host fallbacks
marked), else the activity named after the device type (``CUDA``, ``XPU``, ``MTIA``, ``HPU``;
the CPU reference has only ``CPU``).
Only activities in ``torch.profiler.supported_activities()`` are asked for; the trace
records which.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = 3  # enough to show a repeating step; the first of them is already warm


def activities(device: Any) -> list:
    """CPU plus the device's profiler activity, where this torch build supports it."""
    import torch
    from torch.profiler import ProfilerActivity, supported_activities

    if device.type == torch._C._get_privateuse1_backend_name():
        own = ProfilerActivity.PrivateUse1
    else:
        own = getattr(ProfilerActivity, device.type.upper(), None)
    extra = own is not None and own != ProfilerActivity.CPU and own in supported_activities()
    return [ProfilerActivity.CPU] + ([own] if extra else [])


def rank_path(path: Path, rank: int, world: int) -> Path:
    """Where rank ``rank`` writes its trace: ``path`` itself in one process, one file per rank under several."""
    return path if world == 1 else path.with_suffix(f".rank{rank}.json")


def trace(step: Callable[[int], Any], device: Any, path: Path, first: int, steps: int = STEPS) -> dict:
    """Run ``step(first + i)`` for ``steps`` steps under the profiler; write the Chrome trace to ``path`` atomically."""
    from torch.profiler import profile

    wanted = activities(device)
    with profile(activities=wanted, record_shapes=True, profile_memory=True) as prof:
        for i in range(steps):
            step(first + i)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    prof.export_chrome_trace(str(partial))
    os.replace(partial, path)
    return {"path": str(path), "steps": steps, "activities": [a.name for a in wanted]}
