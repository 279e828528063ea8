"""The result model of `ferry coverage`: one row per (architecture, mode), the summary, the baseline marks.

``FORMAT_VERSION`` is the schema version of ``coverage.json``; bump it with a line below (and
in docs/coverage.md) on every incompatible change. Baseline files have their own version
(``BASELINE_VERSION``).

- 1: first version (meta, environment, config, headline, summary, rows, baseline).
- 2: the shared ``meta`` block (``format``, ``format_version``, ``torchferry``, ``created``,
  ``command``, ``wall_s``: the top-level ``wall_s`` moved into it); every row has the same
  keys (null when not measured); ``failure`` (null, or what stopped the sweep: ``kind``
  ``interrupted``, ``internal``, ...); ``complete`` (false when the sweep stopped early).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum

from torchferry.report.meta import Failure, Meta

FORMAT_VERSION = 2
FORMAT = "torchferry.coverage"
BASELINE_VERSION = 1


class Category(StrEnum):
    PASS = "pass"
    FAIL_PARITY = "fail-parity"
    FAIL_FALLBACK = "fail-fallback"
    FAIL_COMPILE = "fail-compile"
    FAIL_RECOMPILE = "fail-recompile"
    ERROR = "error"
    TIMEOUT = "timeout"
    OOM = "oom"
    SKIPPED = "skipped"  # cannot be measured for a reason that is not the target's fault: out of the denominator


CATEGORIES = tuple(Category)


class Mark(StrEnum):
    """A row against the baseline's expected category."""

    UNCHANGED = "unchanged"
    FIXED = "fixed"
    REGRESSED = "regressed"
    NEW = "new"


@dataclass
class Row:
    """One case: an architecture in one mode on the target, judged against the reference."""

    arch: str
    mode: str
    category: Category
    reason: str
    device: str = ""
    ref: str = ""
    compile: str | None = None
    wall_s: float = 0.0  # parent's clock: the first mode of a process includes its start and the model build
    case_s: float | None = None  # the worker's clock for this mode alone
    model_class: str | None = None
    variant: str | None = None  # the shrink variant that built
    params: int | None = None
    checks: int | None = None
    failed_checks: int | None = None
    fallback_ops: dict[str, int] = field(default_factory=dict)
    graphs: int | None = None
    signatures: int | None = None
    cache: str | None = None
    tokens: dict | None = None
    log: str | None = None
    traceback: str | None = None
    baseline: Mark | None = None

    @property
    def key(self) -> str:
        return f"{self.arch}/{self.mode}"

    @classmethod
    def from_dict(cls, data: dict) -> Row:
        """A row from a worker's event or a store line; unknown keys (from older stores) are dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        known["category"] = Category(known["category"])
        if known.get("baseline") is not None:
            known["baseline"] = Mark(known["baseline"])
        return cls(**known)


@dataclass
class CoverageReport:
    meta: Meta
    environment: dict
    config: dict
    headline: list[str]
    summary: dict
    rows: list[Row]
    complete: bool = True
    baseline: dict | None = None  # file, counts, regressed, fixed, missing
    failure: Failure | None = None
