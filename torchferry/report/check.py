"""The one result model of `ferry check`; every reporter (terminal, JSON, HTML) renders it.

``FORMAT_VERSION`` is the schema version of ``report.json``; bump it with a line below (and
in docs/check/report-format.md) on every incompatible change.

- 1: first version (meta, environment, config, parity, timing, resume, exit, cost, verdict, failure).
- 2: ``config.nproc``; ``timing.ranks`` (the target's per-rank timings under ``--nproc N``, N > 1)
  and ``rank`` in each device timing (null outside a process group).
- 3: one ``meta`` block shape for every command (``format``, ``format_version``, ``torchferry``,
  ``created``, ``command``, ``wall_s``); ``config.mode`` uses the one set of mode names
  (``train``, ``forward``, ``generate``); verdict ``stopped`` when something other than a
  finding ended the run; ``failure`` is ``{kind (an error slug), message, exit_status,
  phase, log}``; ``config`` gains ``nnodes``, ``rdzv_endpoint``, ``eval_seed``,
  ``tolerance`` (resolved once) and ``workload_source``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchferry.report.comparison import Comparison
from torchferry.report.meta import Failure, Meta

FORMAT_VERSION = 3
FORMAT = "torchferry.check"


class Verdict(StrEnum):
    GO = "go"
    CONDITIONS = "go-with-conditions"
    NO_GO = "no-go"
    NOT_RUN = "not-run"
    STOPPED = "stopped"  # an error, a timeout or Ctrl-C ended the run before it could decide


GO, CONDITIONS, NO_GO, NOT_RUN, STOPPED = Verdict


class ParityStatus(StrEnum):
    PASS = "pass"
    FAIL_ACCURACY = "fail_accuracy"
    EAGER_TWO_RUNS_DIFFER = "eager_two_runs_differ"
    NON_FINITE = "non_finite"
    FAIL_TO_RUN = "fail_to_run"
    NOT_RUN = "not-run"


class TimingStatus(StrEnum):
    MEASURED = "measured"
    PARTIAL = "partial"  # some devices (or phases) measured before the run stopped
    NOT_RUN = "not-run"


class ResultStatus(StrEnum):
    """Status of the resume, exit and cost results."""

    PASS = "pass"
    CONDITIONS = "conditions"
    FAIL = "fail"
    ESTIMATED = "estimated"
    NOT_RUN = "not-run"


@dataclass
class ParityResult:
    status: ParityStatus = ParityStatus.NOT_RUN
    deterministic: bool | None = None
    tolerance: dict = field(default_factory=dict)
    outputs: list[Comparison] = field(default_factory=list)
    gradients: list[Comparison] = field(default_factory=list)
    loss_curve: dict = field(default_factory=dict)  # ref, target, fp64 lists + comparison
    tokens: dict = field(default_factory=dict)  # match, ref, target, first_mismatch
    modules: list[Comparison] = field(default_factory=list)  # execution order
    first_divergent_module: Comparison | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class DeviceTiming:
    device: str
    rank: int | None = None  # the target's process-group rank under --nproc N > 1
    python_start_s: float | None = None  # process spawn -> interpreter running torchferry
    import_s: float | None = None  # import torch (+ transformers)
    load_s: float | None = None  # build the workload and move it to the device
    first_call_s: float | None = None  # first step, compilation included when --compile
    cold_start_s: float | None = None  # process spawn -> first result
    time_to_n_s: float | None = None  # process spawn -> N steps done: the headline
    steps: list[float] = field(default_factory=list)  # warm-up curve, per step (synchronised)
    steady: dict = field(default_factory=dict)  # median_s, p90_s, samples, rounds
    units_per_step: float = 0.0
    unit: str = "tokens"
    throughput_per_s: float | None = None
    peak_memory: dict = field(default_factory=dict)  # bytes, source
    fallback_ops: dict = field(default_factory=dict)  # op -> count (devices that track them)
    fallback_share: float | None = None  # fallback op calls / all op calls
    compile: dict = field(default_factory=dict)  # backend, graphs, recompilations
    flops_per_step: float | None = None


@dataclass
class TimingResult:
    status: TimingStatus = TimingStatus.NOT_RUN
    ref: DeviceTiming | None = None
    target: DeviceTiming | None = None
    speedup_time_to_n: float | None = None  # ref / target: > 1 means the target is faster
    speedup_steady: float | None = None
    ranks: list[DeviceTiming] = field(default_factory=list)  # the target's ranks under --nproc N > 1; target is rank 0
    notes: list[str] = field(default_factory=list)


@dataclass
class ResumeResult:
    status: ResultStatus = ResultStatus.NOT_RUN  # pass | fail | not-run
    saved_at_step: int | None = None
    uninterrupted: list[float] = field(default_factory=list)
    resumed: list[float] = field(default_factory=list)
    max_abs_diff: float | None = None
    exact: bool | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class ExitFormat:
    name: str  # torch.save state dict | safetensors | save_pretrained | optimizer state
    path: str = ""
    saved: bool = False
    loads_plain: bool = False  # loads with no map_location and without torchferry
    location_tags: list[str] = field(default_factory=list)
    needs_map_location: bool = False
    needs_package: str | None = None
    parity: Comparison | None = None
    error: str | None = None
    fix: str | None = None
    skipped: str | None = None  # why this format was not reloaded (its class's loader needs more than the file)


@dataclass
class ExitResult:
    status: ResultStatus = ResultStatus.NOT_RUN  # pass | conditions | fail | not-run
    torchferry_absent: bool | None = None
    loader_device: str = ""
    formats: list[ExitFormat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class CostResult:
    status: ResultStatus = ResultStatus.NOT_RUN  # estimated | not-run
    devices: list[dict] = field(default_factory=list)  # device, instance, price, cost per unit, utilisation
    break_even: dict = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)


@dataclass
class VerdictItem:
    result: str
    verdict: Verdict
    reason: str


@dataclass
class CheckReport:
    meta: Meta
    environment: dict
    config: dict  # the resolved CheckConfig, as written into the report
    parity: ParityResult = field(default_factory=ParityResult)
    timing: TimingResult = field(default_factory=TimingResult)
    resume: ResumeResult = field(default_factory=ResumeResult)
    exit: ExitResult = field(default_factory=ExitResult)
    cost: CostResult = field(default_factory=CostResult)
    verdict: Verdict = Verdict.NOT_RUN
    verdicts: list[VerdictItem] = field(default_factory=list)
    failure: Failure | None = None  # set when the run stopped early
    progress: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
