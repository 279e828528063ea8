"""What one rank's step computes and moves: FLOPs, bytes each op reads and writes, collectives.

A dispatch mode sees DTensor-level ops under tensor parallelism; each op is counted on the
tensors the rank holds (a DTensor's local shard), so FLOPs and bytes are per rank. FLOPs use
PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``, FlopCounterMode's table),
plus the CPU flash-attention kernel the fake trace runs (counted with the same SDPA formula,
halved when causal, since a causal kernel skips the masked half).
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from typing import Any

# collective op name -> (kind, bytes each rank sends per byte of the named tensor, index of that tensor)
# Ring algorithms: all-gather and reduce-scatter move (n-1)/n of the full buffer per rank, all-reduce twice that.
COUNTED_NAMESPACES = ("aten", "fsdp", "c10d", "_c10d_functional")
COLLECTIVES = {
    "c10d._allgather_base_.default": ("all_gather", 1, 0),
    "c10d.allgather_into_tensor_coalesced_.default": ("all_gather", 1, 0),
    "c10d._reduce_scatter_base_.default": ("reduce_scatter", 1, 1),
    "c10d.reduce_scatter_tensor_coalesced_.default": ("reduce_scatter", 1, 1),
    "c10d.allreduce_.default": ("all_reduce", 2, 0),
    "_c10d_functional.all_reduce.default": ("all_reduce", 2, 0),
    "_c10d_functional.all_gather_into_tensor.default": ("all_gather", 1, -1),
    "_c10d_functional.reduce_scatter_tensor.default": ("reduce_scatter", 1, 0),
}


def _nbytes(tensor: Any) -> int:
    """Bytes the rank holds for ``tensor`` (a DTensor's local shard)."""
    local = getattr(tensor, "_local_tensor", tensor)
    return local.numel() * local.element_size()


def _leaves(value: Any) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _local(value: Any) -> Any:
    from torch.distributed.tensor import DTensor
    from torch.utils._pytree import tree_map_only

    return tree_map_only(DTensor, lambda t: t._local_tensor, value)


def _group_size(func_name: str, args: tuple, kwargs: dict) -> int:
    """Ranks taking part: the c10d ops carry their process group, the functional ones its name."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    values = (*args, *kwargs.values())
    if func_name.startswith("_c10d_functional"):  # (..., group_name) last
        return _resolve_process_group([v for v in values if isinstance(v, str)][-1]).size()
    for arg in values:
        if isinstance(arg, dist.ProcessGroup):
            return arg.size()
    return dist.get_world_size()


@cache
def _make_mode_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten
    cpu_flash = aten._scaled_dot_product_flash_attention_for_cpu
    cpu_flash_bw = aten._scaled_dot_product_flash_attention_for_cpu_backward

    flop_ops = {*flop_registry, cpu_flash, cpu_flash_bw}

    def flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        packet = func.overloadpacket
        if packet in flop_registry:
            return int(flop_registry[packet](*args, **kwargs, out_val=out))
        if packet is cpu_flash:
            query, key, value, _dropout, causal = (list(args) + [0.0, False])[:5]
            return int(sdpa_flop_count(query.shape, key.shape, value.shape) // (2 if causal else 1))
        grad_out, query, key, value = args[:4]  # cpu_flash_bw
        causal = args[7] if len(args) > 7 else kwargs.get("is_causal", False)
        return int(sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape) // (2 if causal else 1))

    class StepCounter(TorchDispatchMode):
        """Counts FLOPs, op bytes and collective traffic of every op dispatched while active."""

        def __init__(self) -> None:
            super().__init__()
            self.flops = 0
            self.op_bytes = 0
            self.collectives: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "bytes": 0, "wire_bytes": 0})
            self.by_op: dict[str, int] = defaultdict(int)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func.namespace not in COUNTED_NAMESPACES:
                return out
            name = str(func)
            if name in COLLECTIVES:
                kind, factor, index = COLLECTIVES[name]
                size = _group_size(name, args, kwargs)
                full = _nbytes(_leaves(args)[index] if index >= 0 else _leaves(out)[0])
                entry = self.collectives[kind]
                entry["calls"] += 1
                entry["bytes"] += full
                entry["wire_bytes"] += factor * full * (size - 1) // max(size, 1)
                return out
            if func.overloadpacket in flop_ops:
                count = flops(func, _local(args), _local(kwargs), _local(out))
                self.flops += count
                self.by_op[str(func.overloadpacket)] += count
            if not _moves_nothing(func):
                self.op_bytes += sum(_nbytes(t) for t in _leaves((args, kwargs, out)))
            return out

    return StepCounter


@cache
def _moves_nothing(func: Any) -> bool:
    """Views and metadata ops move no bytes (every output aliases an input without writing it)."""
    schema = func._schema
    return bool(schema.returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def step_counter() -> Any:
    """A fresh StepCounter (the class is built on first use so that importing this module imports no torch)."""
    return _make_mode_class()()
