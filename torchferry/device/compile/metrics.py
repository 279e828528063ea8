"""`torch.neuron.get_dynamo_metrics()`: one record per graph the `neuron` backend compiled.

TorchNeuron keeps one record per compiled graph and rank, with the field names
``graph_name``, ``graph_node_count`` and ``torch_neuronx_compile_us``; the records here use
them, and add what the built-in device knows besides (cache outcome, input signature).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from typing import Any

import torch

_lock = threading.Lock()
_records: list[dict[str, Any]] = []
_break_baseline: dict[str, int] = {}
graph_ids = itertools.count()


def rank() -> int:
    """This process's rank: torch.distributed's when initialised, else ``RANK`` (default 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def signature(example_inputs: Sequence[Any]) -> str:
    """The input signature a graph is compiled for: device, dtype, shape (and strides if not
    contiguous) of each tensor, the type of anything else."""
    parts = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype).removeprefix("torch.")
            parts.append(f"{x.device.type}:{dtype}{list(x.shape)}{'' if x.is_contiguous() else list(x.stride())}")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts)


def compile_id() -> str | None:
    """Dynamo's id of the compilation in progress, ``"<frame>/<n>"``: the n-th compilation
    of that frame (n > 0 is a recompilation), or None outside one."""
    current = torch._guards.CompileContext.current_compile_id()
    if current is None or current.frame_id is None:
        return None
    return f"{current.frame_id}/{current.frame_compile_id}"


def add_record(**record: Any) -> None:
    record["rank"] = rank()
    with _lock:
        _records.append(record)


def _recompiles(graphs: list[dict[str, Any]]) -> int:
    """Compilations of a frame after its first, counted from the records' compile ids
    (`torch._dynamo.utils.counters["recompiles"]` stays empty on torch 2.13)."""
    ids = {g["compile_id"] for g in graphs if g.get("compile_id")}
    return sum(1 for i in ids if not i.endswith("/0"))


def _graph_breaks() -> list[dict[str, Any]]:
    from torch._dynamo.utils import counters

    breaks = []
    for reason, count in counters["graph_break"].items():
        new = count - _break_baseline.get(reason, 0)
        if new > 0:
            breaks.append({"reason": reason, "count": new})
    return breaks


def get_dynamo_metrics() -> dict[str, Any]:
    """This rank's compilations since the last reset.

    ``graphs``: one record per compiled graph (forward, backward or inference), with
    TorchNeuron's field names ``graph_name``, ``graph_node_count`` and
    ``torch_neuronx_compile_us``, plus ``cache`` (hit, miss, bypass or disabled),
    ``cache_key``, ``input_signature`` and ``kind`` (forward, backward or inference).
    ``compile_id`` (Dynamo's ``"<frame>/<n>"``; a backward graph has its forward's).
    ``graph_breaks``: Dynamo's break reasons with counts. ``recompiles``: compilations of a
    frame after its first (a new input shape, a failed guard).
    """
    with _lock:
        graphs = [dict(r) for r in _records]
    return {"rank": rank(), "graphs": graphs, "graph_breaks": _graph_breaks(), "recompiles": _recompiles(graphs)}


def reset_dynamo_metrics() -> None:
    """Forget the records and graph breaks so far (Dynamo's own counters are left alone)."""
    from torch._dynamo.utils import counters

    with _lock:
        _records.clear()
        _break_baseline.clear()
        _break_baseline.update(counters["graph_break"])
