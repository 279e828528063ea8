"""``--shard K/N``: which architectures one of N machines runs, the same answer on every machine.

The assignment depends only on the selected architectures and a cost table that ships with
torchferry (the ``cost_s`` of the target's baseline: each architecture's measured seconds,
written by ``--write-baseline``), never on the order they were given in, the machine, or the
clock. Architectures are sorted by cost, dearest first, and dealt out in a snake round-robin
(1..N, then N..1, ...), so that each shard gets one of the dearest, one of the next, and so
on: no shard collects all the big models, and the shards' totals differ by at most about one
architecture's cost. Architectures the table does not know cost its median (all the same when
the table is empty: a plain round-robin by name). Each shard is one ordinary process, so any
scheduler (a CI matrix, a SLURM array, a Kubernetes Indexed Job) runs it; ``ferry coverage
merge`` puts the shards' stores back together.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchferry.errors import UsageError


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based: K of K/N
    count: int  # N

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N, else a UsageError naming the value and the form."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. --shard 1/4 for the first of "
                         "four shards; K is 1-based, as in SLURM_ARRAY_TASK_ID=1..N).")
    return Shard(int(match[1]), int(match[2]))


def assign(names: Sequence[str], costs: Mapping[str, float], count: int) -> list[list[str]]:
    """All ``count`` shards' names (each in sorted order): dearest first, snake round-robin."""
    known = [costs[n] for n in names if n in costs]
    default = statistics.median(known) if known else 1.0
    order = sorted(set(names), key=lambda n: (-costs.get(n, default), n))
    shards: list[list[str]] = [[] for _ in range(count)]
    for i, name in enumerate(order):
        turn, pos = divmod(i, count)
        shards[pos if turn % 2 == 0 else count - 1 - pos].append(name)
    return [sorted(s) for s in shards]


def select(names: Sequence[str], costs: Mapping[str, float], shard: Shard) -> list[str]:
    """The names shard ``shard`` runs."""
    return assign(names, costs, shard.count)[shard.index - 1]
