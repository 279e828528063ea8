"""One architecture's coverage job: what the parent (sweep.py) hands a worker process, typed on both sides.

The job crosses a process boundary as JSON (``to_dict``/``from_dict``); everywhere else it is this frozen
dataclass. It owns what is derived from it once: the case key of each of its modes (``case``, the
store's key, ``torchferry.report.coverage.case_key``), the base fields of each of its rows (``base``:
sweep.py's rows for a timeout or a crash and the worker's own rows start from it), and the memory
limit a case is sized against (``memory_limit_gib``, ``--memory-gb``'s default when the job names none).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torchferry.coverage.methods import TORCHFERRY
from torchferry.report.coverage import DEFAULT_SUITE, case_key

DEFAULT_MEMORY_GIB = 12.0  # --memory-gb's default: the address-space limit of one worker process


@dataclass(frozen=True, kw_only=True)
class CoverageJob:
    arch: str  # the row's name
    spec: str  # what the suite builds from: a model type, a config.json path or a Hub id
    modes: tuple[str, ...]  # the modes still to run, in order
    ref: str
    target: str
    seed: int
    suite: str = DEFAULT_SUITE
    model_id: str | None = None
    compile: str | None = None
    tol: float | None = None
    plugins: tuple[str, ...] = ()
    method: str = TORCHFERRY.name
    trust_remote_code: bool = False
    threads: int = 1
    memory_gib: float | None = None  # None: no address-space limit on this process (a case run in-process)

    @property
    def memory_limit_gib(self) -> float:
        """The memory a case is sized against (``--memory-gb``; its default when the job sets no limit)."""
        return self.memory_gib or DEFAULT_MEMORY_GIB

    @property
    def name(self) -> str:
        """``suite/arch``: the architecture across suites (what ``--shard`` splits)."""
        return f"{self.suite}/{self.arch}"

    def case(self, mode: str) -> str:
        """``suite/arch/mode``: the store's key of one of this job's rows."""
        return case_key(self.suite, self.arch, mode)

    def cases(self) -> list[str]:
        return [self.case(m) for m in self.modes]

    def base(self, mode: str) -> dict[str, Any]:
        """The fields every row of ``mode`` starts from (torchferry.report.coverage.Row's), before a result."""
        return {"arch": self.arch, "model_id": self.model_id, "suite": self.suite, "mode": mode, "device": self.target,
                "ref": self.ref, "compile": self.compile}

    def with_modes(self, modes: list[str] | tuple[str, ...]) -> CoverageJob:
        return dataclasses.replace(self, modes=tuple(modes))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(modes=list(self.modes), plugins=list(self.plugins))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CoverageJob:
        """A job from its JSON; a key the job does not have is a bug of the caller's, refused by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise TypeError(f"unknown coverage job fields: {', '.join(unknown)} (fields: {', '.join(sorted(names))})")
        return cls(**{**data, "modes": tuple(data["modes"]), "plugins": tuple(data.get("plugins") or ())})
