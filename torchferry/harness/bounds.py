"""Numeric options, checked before anything runs: finite and in range, one message shape for every command.

``nan`` and ``inf`` parse as floats and pass every comparison that a plain ``value <= 0`` check
makes (``nan <= 0`` is False), so a price or a tolerance of ``nan`` used to reach the report as
"$nan". Each command lists its numeric options here with their range, and the same option
means the same range in every command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchferry.errors import UsageError

SEED_MAX = 2**63 - 1  # torch.manual_seed's range for a non-negative seed


@dataclass(frozen=True)
class Bound:
    """A numeric option's range: ``low`` (inclusive, or exclusive with ``above``), ``high`` (inclusive), whole numbers."""

    low: float | None = None
    above: bool = False  # low is exclusive: "greater than low"
    high: float | None = None
    whole: bool = False
    why: str = ""  # what the range protects, said when a value is out of it

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        parts = []
        if self.low is not None:
            parts.append(f"greater than {self.low:g}" if self.above else f"at least {self.low:g}")
        if self.high is not None:
            parts.append(f"at most {self.high:g}")
        return kind + (" " + " and ".join(parts) if parts else "")


# the ranges shared by every command (ferry check, coverage and plan)
COUNT = Bound(low=1, whole=True)
SECONDS = Bound(low=0, above=True)
NON_NEGATIVE = Bound(low=0)
POSITIVE = Bound(low=0, above=True)
SEED = Bound(low=0, high=SEED_MAX, whole=True)


def check(option: str, value: float | int | None, bound: Bound) -> None:
    """Raise a UsageError naming ``option``, the bad value and the valid range; None (not given) passes."""
    if value is None:
        return
    bad = (isinstance(value, float) and not math.isfinite(value)
           or bound.low is not None and (value <= bound.low if bound.above else value < bound.low)
           or bound.high is not None and value > bound.high)
    if bad:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        raise UsageError(f"{option} must be {bound.describe()} (got {shown}).{' ' + bound.why if bound.why else ''}")


def check_all(values: dict[str, tuple[float | int | None, Bound]]) -> None:
    """``check`` each ``option: (value, bound)`` in order."""
    for option, (value, bound) in values.items():
        check(option, value, bound)
