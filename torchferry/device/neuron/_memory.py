"""Memory statistics of the built-in device, with `torch.cuda.memory`'s names.

Freed blocks are cached for reuse, as on CUDA: "reserved" is "allocated" plus the cached
blocks, and `empty_cache()` returns those to the host (TORCHFERRY_NO_MEMORY_CACHING=1 turns
the cache off). Capacity and out-of-memory errors count allocated bytes only.
"""

from __future__ import annotations

from typing import Any

from torchferry.device import _runtime
from torchferry.device.neuron._devices import _index


def memory_stats(device: Any = None) -> dict[str, Any]:
    """Flat dict like `torch.cuda.memory_stats` (`allocated_bytes.all.current`, ...)."""
    raw = _runtime.core()._memory_stats(_index(device))
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            for field, number in value.items():
                flat[f"{key}.all.{field}"] = number
        else:
            flat[key] = value
    return dict(sorted(flat.items()))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _runtime.core()._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _runtime.core()._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return every device's cached blocks to the host; allocated memory is untouched."""
    _runtime.core()._empty_cache()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    mib = 2**20
    lines = [
        f"neuron:{_index(device)} memory (torchferry host device)",
        f"  allocated: {stats['allocated_bytes.all.current'] / mib:.1f} MiB "
        f"(peak {stats['allocated_bytes.all.peak'] / mib:.1f} MiB)",
        f"  reserved:  {stats['reserved_bytes.all.current'] / mib:.1f} MiB "
        f"(peak {stats['reserved_bytes.all.peak'] / mib:.1f} MiB; cached blocks included)",
        f"  capacity:  {stats['capacity_bytes'] / mib:.1f} MiB",
        f"  allocations: {stats['allocation.all.allocated']} (live {stats['allocation.all.current']}), "
        f"OOMs: {stats['num_ooms']}",
    ]
    return "\n".join(lines)


