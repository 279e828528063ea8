"""The result model of `ferry plan`, rendered by torchferry/report/plan.py.

FORMAT_VERSION history (``meta.format = "torchferry.plan"``):
- 1: first version (meta, model, capacity, target, reference, layouts, skipped, validations, notes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchferry.plan.layout import Layout
from torchferry.plan.roofline import Bounds, Peaks
from torchferry.plan.trace import StepTrace

FORMAT = "torchferry.plan"
FORMAT_VERSION = 1
GIB = 2**30


@dataclass
class LayoutResult:
    layout: Layout
    trace: StepTrace
    capacity_bytes: int
    bounds: Bounds
    reference: Bounds | None = None

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.trace.peak_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0

    @property
    def verdict(self) -> str:
        gib = abs(self.headroom_bytes) / GIB
        return f"fits with {gib:.2f} GiB headroom" if self.fits else f"does not fit by {gib:.2f} GiB"

    def to_dict(self) -> dict:
        return {"layout": self.layout.to_dict(), "fits": self.fits, "verdict": self.verdict,
                "peak_bytes": self.trace.peak_bytes, "headroom_bytes": self.headroom_bytes,
                "breakdown_bytes": self.trace.breakdown, "trace": self.trace.to_dict(), "bounds": self.bounds.to_dict(),
                "reference": self.reference.to_dict() if self.reference else None}


@dataclass
class PlanReport:
    meta: Any  # torchferry.report.meta.Meta
    model: dict
    capacity: dict  # bytes, source
    target: Peaks
    reference: Peaks | None = None
    layouts: list[LayoutResult] = field(default_factory=list)  # ranked: fitting ones by step bound, then the rest
    searched: bool = False
    skipped: list[str] = field(default_factory=list)
    validations: list[Any] = field(default_factory=list)  # torchferry.plan.validate.Validation
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> LayoutResult | None:
        return self.layouts[0] if self.layouts and self.layouts[0].fits else None

    def to_dict(self) -> dict:
        return {"meta": asdict(self.meta), "model": self.model, "capacity": self.capacity, "target": self.target.to_dict(),
                "reference": self.reference.to_dict() if self.reference else None, "searched": self.searched,
                "layouts": [r.to_dict() for r in self.layouts], "skipped": self.skipped,
                "validations": [v.to_dict() for v in self.validations], "notes": self.notes}


def rank(results: list[LayoutResult]) -> list[LayoutResult]:
    """Layouts that fit first, fastest lower-bound step first; then those that do not, closest to fitting first."""
    return sorted(results, key=lambda r: (not r.fits, r.bounds.step_lower_s if r.fits else -r.headroom_bytes))
