"""Compile metrics of the `neuron` backend: TorchNeuron's records, and torchferry's fuller view.

- `get_dynamo_metrics()` (as `torch.neuron.get_dynamo_metrics()`): TorchNeuron's contract, a
  list of `NeuronCompilationMetrics`, one per graph compiled on this rank, with its fields
  (`torch_neuronx/neuron_dynamo_backend/metrics.py` at the snapshot in docs/device/fidelity.md).
  User code that iterates over the records runs the same here and on Trainium.
- `compile_metrics()` (as `torchferry.device.compile_metrics()`): what the built-in device knows
  besides, for the harness and the rehearsal: per graph the cache outcome, cache key, input
  signature, kind and Dynamo's compile id, and Dynamo's graph breaks and the recompilations.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch


@dataclasses.dataclass
class NeuronCompilationMetrics:
    """One compiled graph, with TorchNeuron's fields. graph_id: the graph's cache key; graph_name:
    ``{model_name}_graph_{n}_{kind}``; timestamp: when it compiled (ISO 8601, UTC). The host
    compiles in one step, so ``torch_neuronx_compile_us`` holds the whole compile and the FX-pass
    and lowering times, which TorchNeuron measures apart, are 0."""

    graph_id: str
    graph_name: str = ""
    model_name: str = ""
    has_collectives: bool = False
    graph_node_count: int = 0
    timestamp: str = ""
    torch_neuronx_fx_passes_us: int = 0
    torch_neuronx_lower_us: int = 0
    torch_neuronx_compile_us: int = 0


RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(NeuronCompilationMetrics))

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


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls a collective (a functional c10d op: all-reduce, all-gather, ...)."""
    return any(getattr(node.target, "namespace", "") in ("_c10d_functional", "c10d_functional")
               for node in gm.graph.nodes if node.op == "call_function")


def add_record(**record: Any) -> None:
    """Keep one compiled graph's record: TorchNeuron's fields (graph_id is the cache key) and the extras."""
    record.update(rank=rank(), graph_id=record["cache_key"],
                  timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with _lock:
        _records.append(record)


def _recompiles(graphs: list[dict[str, Any]]) -> int:
    """Compilations of a frame after its first, counted from the records' compile ids
    (`torch._dynamo.utils.counters["recompiles"]` stays empty on torch 2.13)."""
    ids = {g["compile_id"] for g in graphs if g.get("compile_id")}
    return sum(1 for i in ids if not i.endswith("/0"))


def _graph_breaks() -> list[dict[str, Any]]:
    if "torch._dynamo" not in sys.modules:  # nothing compiled in this process: no break, and Dynamo stays unimported
        return []
    from torch._dynamo.utils import counters

    breaks = []
    for reason, count in counters["graph_break"].items():
        new = count - _break_baseline.get(reason, 0)
        if new > 0:
            breaks.append({"reason": reason, "count": new})
    return breaks


def get_dynamo_metrics() -> list[NeuronCompilationMetrics]:
    """TorchNeuron's `get_dynamo_metrics()`: one record per graph compiled on this rank since the
    last reset, in compile order. torchferry's fuller view is `compile_metrics()`."""
    with _lock:
        return [NeuronCompilationMetrics(**{k: r[k] for k in RECORD_FIELDS if k in r}) for r in _records]


def compile_metrics() -> dict[str, Any]:
    """This rank's compilations since the last reset, as the built-in device knows them (a torchferry
    API: TorchNeuron has no such function; `torchferry.device.compile_metrics()`).

    ``graphs``: one dict per compiled graph (forward, backward or inference) with TorchNeuron's
    fields (`NeuronCompilationMetrics`) plus ``cache`` (hit, miss, bypass or disabled),
    ``cache_key``, ``input_signature``, ``kind`` (forward, backward or inference), ``rank`` and
    ``compile_id`` (Dynamo's ``"<frame>/<n>"``; a backward graph has its forward's).
    ``graph_breaks``: Dynamo's break reasons with counts. ``recompiles``: compilations of a
    frame after its first (a new input shape, a failed guard). ``rank``: this process's rank.
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
