"""The result model of `ferry plan`: what one layout needs and costs, and the plan as a whole.

The plan's modules compute these values (torchferry/plan/), torchferry/report/plan_render.py
renders them; like check's and coverage's models, they live in the report layer so that a renderer
never imports a command.

FORMAT_VERSION history (``meta.format = "torchferry.plan"``):
- 1: first version (meta, model, capacity, target, reference, layouts, skipped, validations, notes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from torchferry.report.meta import Meta

FORMAT = "torchferry.plan"
FORMAT_VERSION = 1
GIB = 2**30


@dataclass(frozen=True)
class Layout:
    """One way to spread the job over the ranks: what the plan traces, validates and ranks."""

    world: int
    fsdp: int
    tp: int
    checkpointing: str
    micro_batch: int
    seq_len: int
    precision: str
    optimizer: str

    @property
    def label(self) -> str:
        return f"FSDP {self.fsdp} x TP {self.tp}, AC {self.checkpointing}"

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: the TP ranks of one FSDP group share their micro-batch."""
        return self.micro_batch * self.fsdp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label, "global_batch": self.global_batch,
                "tokens_per_step": self.tokens_per_step}


CATEGORIES = ("parameters", "gradients", "optimizer state", "activations", "temporaries")


@dataclass
class StepTrace:
    """What one rank's step needs: memory at its peak, by category, and the work it does."""

    peak_bytes: int
    breakdown: dict[str, int]
    tracker: dict[str, int]
    flops: int
    op_bytes: int
    collectives: dict[str, dict[str, int]]
    trace_s: float
    flops_by_op: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Peaks:
    """One accelerator's share of an instance's peak figures, with where they come from."""

    instance: str
    accelerators: int
    flops: float
    hbm_bytes_per_s: float | None
    link_bytes_per_s: float | None
    dtype: str
    price_per_hour: float
    price_kind: str
    sources: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Bounds:
    """Lower bounds of one traced step on an instance, and the throughput and cost they cap."""

    instance: str
    compute_s: float
    collective_s: float | None
    hbm_unfused_s: float | None
    step_lower_s: float
    limited_by: str
    tokens_per_s_upper: float
    cost_per_1m_tokens_lower: float
    cost_at_utilisation: dict[str, float]
    scope: str  # what the figures cover

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Validation:
    """The plan's predicted peak for one layout beside the peaks measured on the built-in device."""

    layout: str
    predicted_bytes: int
    measured_bytes: list[int]  # per rank
    error: float  # (predicted - worst measured) / worst measured
    tolerance: float
    passed: bool
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LayoutResult:
    """One layout's trace and bounds, judged against the capacity of one logical core."""

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
    """Everything `ferry plan` found, in the order the reports show it."""

    meta: Meta
    model: dict
    capacity: dict  # bytes, source
    target: Peaks
    reference: Peaks | None = None
    layouts: list[LayoutResult] = field(default_factory=list)  # ranked: fitting ones by step bound, then the rest
    searched: bool = False
    skipped: list[str] = field(default_factory=list)
    validations: list[Validation] = field(default_factory=list)
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
