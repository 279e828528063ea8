"""One tensor judged by the parity rule: the result record and its one-line description.

Shared by every command that judges parity (check, coverage) and by every renderer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


FINAL_BUFFER = "final buffer"  # the name of a model buffer's comparison after training: "final buffer <path>"


class ComparisonStatus(StrEnum):
    PASS = "pass"  # outside allclose, but within the fp64-relative rule
    PASS_ALLCLOSE = "pass_allclose"
    FAIL_ACCURACY = "fail_accuracy"
    FAIL_SHAPE = "fail_shape"
    FAIL_DTYPE = "fail_dtype"
    NON_FINITE = "non_finite"
    MISSING = "missing"  # present on the reference, absent on the target (e.g. a gradient)


@dataclass
class Comparison:
    """One tensor (or tensor family) judged by the fp64-relative rule, with figures beside it."""

    name: str
    passed: bool
    status: ComparisonStatus
    rmse_target: float | None = None  # target vs fp64 golden
    rmse_ref: float | None = None  # reference device vs fp64 golden
    multiplier: float | None = None
    tol: float | None = None
    allclose: bool | None = None  # target vs reference at atol = rtol = tol
    cosine: float | None = None  # target vs reference
    max_abs_diff: float | None = None
    numel: int = 0
    zero: bool = False  # both sides exactly zero (cosine is undefined, not 0)
    allowed: float | None = None  # the distance the rule allows here (a script's noise rule), beside the one found
    relative_diff: float | None = None  # a distance relative to the reference's magnitude (a module's summary)
    at: str | None = None  # where it was judged: a step, a phase and a module's class and line
    note: str | None = None  # what the figures mean in words


def describe(c: Comparison) -> str:
    """One line of figures: the rule's inputs and the reported extras."""
    if c.zero:
        return "exactly zero on both sides"
    parts = []
    if c.rmse_target is not None:
        parts.append(f"rmse vs fp64 {c.rmse_target:.3g} (target) vs {c.rmse_ref:.3g} (ref), limit x{c.multiplier:g} + {c.tol / 10:.1g}")
    if c.cosine is not None:
        parts.append(f"cosine {c.cosine:.6f}")
    if c.max_abs_diff is not None:
        parts.append(f"max |diff| {c.max_abs_diff:.3g}")
    if c.relative_diff is not None and math.isfinite(c.relative_diff):
        parts.append(f"relative difference {c.relative_diff:.3g}")
    if c.allowed is not None:
        parts.append(f"allowed {c.allowed:.3g}")
    if c.note:
        parts.append(c.note)
    if c.at:
        parts.append(f"at {c.at}")
    return "; ".join(parts) or str(c.status)


def ratio(c: Comparison) -> float | None:
    """How much further from fp64 the target is than the reference (the plotted per-module error)."""
    if c.rmse_target is None or c.rmse_ref is None:
        return None
    if c.rmse_ref == 0:
        return 1.0 if c.rmse_target == 0 else math.inf
    return c.rmse_target / c.rmse_ref
