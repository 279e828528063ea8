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
- 4: ``rehearsal`` (what a target that emulates another device predicts about the real one: host
  fallbacks, host syncs, eager compilations per step, compiled graphs per frame, numerics, memory,
  placement) and the ``rehearsal`` verdict item; a placement error on the target is a finding whose
  ``failure.message`` starts ``portability failure:`` with the op and the user's line.
  Timing: ``emulates``, ``stability`` (cv, round_spread, stable) and ``profile_trace`` per device
  timing, ``timing.warnings`` (unstable figures); cost: ``projection`` (the target at 10/25/40/60%
  of its peak: roofline step, cost per unit, break-even utilisation), ``accelerators_used`` per
  device row; an emulated target's row has no ``cost_per_unit`` or ``utilisation``.
- 5: ``next_actions``: every condition, failure and stop of the verdict with its fix, as one list
  (``result``, ``action``), in the order the reports show them.
- 6: ``failure.kind`` is always an error slug (docs/check/errors.md): a target that fails where the
  reference ran gives the slug of its error (``workload``, ``non-finite``, ...), no longer the parity
  status (``fail_to_run``/``non_finite``, which stays in ``parity.status``).
- 7: ``workload`` says which kind of workload ran: ``{"kind": "build"}`` (a ``build()`` workload) or
  ``{"kind": "script", command, run_as, launcher, script, module, nproc, seeded, steps_recorded, stopped}``
  (`ferry check -- COMMAND`, an unchanged script); ``parity.grad_norm_curve`` (per-step gradient
  norms, scripts); device timing ``run_s`` (process start to exit) and ``warmup_s`` (time the early
  steps took above the steady step).
- 8: one ``config`` shape for every source (check/config.py ``CheckConfig``): the common fields and
  ``source``, a build() workload or named model (``kind`` workload|model, ``spec``, ``mode``, ``dtype``,
  ``steps``, ...) or a script (``kind`` script, ``command``, ``steps_limit``, ``emulates``); ``subject``
  (the report's first line); ``workload`` is gone: a script's facts are ``script`` (``seeded``,
  ``optimizer_steps``, ``backward_calls``, ``losses``, ``stopped``, ``scan_findings``); ``timing.steps``
  (the N of "time to N steps"); ``--profile`` is ``--trace``, ``--dtype`` is ``--precision``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchferry.records import Record
from torchferry.report.comparison import Comparison
from torchferry.report.meta import Failure, Meta

FORMAT_VERSION = 8
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
    grad_norm_curve: dict = field(default_factory=dict)  # scripts: per-step gradient norms, ref and target + comparison
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
    emulates: str | None = None  # the device profile an emulating device stands for: its times are the host's
    stability: dict = field(default_factory=dict)  # steady state: cv, round_spread, stable, limits (check/timing.py)
    profile_trace: str | None = None  # the torch.profiler Chrome trace of this device (--profile)
    run_s: float | None = None  # scripts: process start -> exit, the whole run
    warmup_s: float | None = None  # scripts: what the early steps took above the steady step


@dataclass
class TimingResult:
    status: TimingStatus = TimingStatus.NOT_RUN
    steps: int | None = None  # the steps the "time to N steps" headline covers (N)
    step_unit: str = "steps"  # what a step is: optimizer steps, or a script's backward calls when it has no optimizer
    ref: DeviceTiming | None = None
    target: DeviceTiming | None = None
    speedup_time_to_n: float | None = None  # ref / target: > 1 means the target is faster
    speedup_steady: float | None = None
    ranks: list[DeviceTiming] = field(default_factory=list)  # the target's ranks under --nproc N > 1; target is rank 0
    warnings: list[str] = field(default_factory=list)  # unstable figures: shown in every report
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
    # the target at stated fractions of its peak FLOP/s: roofline step, cost per unit, break-even utilisation
    projection: dict = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)


class RehearsalStatus(StrEnum):
    CLEAN = "clean"  # nothing the rehearsal predicts stands in the way
    CONDITIONS = "conditions"
    FAIL = "fail"  # a portability failure (a placement error)
    NOT_RUN = "not-run"  # the target is not an emulation (or the run stopped before it)


@dataclass
class HostFallbackOp:
    """One op the emulated target predicts would run on the host."""

    op: str
    calls: int
    share_of_calls: float  # of all op calls of the run
    share_of_time: float | None  # of device-op time in one profiled step on this host (None: not profiled)
    reason: str  # why, with the source it comes from


@dataclass
class CompiledFrame:
    """One frame Dynamo compiled: its graphs (one per input signature) and what changed between them."""

    frame: str
    graphs: int
    recompiles: int
    changing_inputs: list[str] = field(default_factory=list)  # "graph input 2: neuron:int64[2, 8] -> [2, 12]"


@dataclass
class CompileRehearsal:
    graphs: int = 0  # compiled graphs (forward, backward, inference or cached)
    frames: list[CompiledFrame] = field(default_factory=list)
    graph_breaks: list[dict] = field(default_factory=list)  # reason, count


@dataclass
class NumericsRehearsal:
    mode: str = ""  # target (64-bit values at 32 bits) or host
    rerun: bool = False  # the target ran again under host numerics
    host_parity: str | None = None  # the parity status of that rerun
    explains: bool | None = None  # whether 64-bit narrowing explains the parity failure
    first_diverging_module: str | None = None  # first module whose output narrowing changes
    note: str = ""


@dataclass
class Placement(Record):
    """A placement error the device raised: the op, the devices, and the user's line."""

    op: str
    devices: list[str]
    argument: str | None
    file: str | None
    line: int | None
    code: str | None
    message: str


@dataclass
class KnownIssueOp:
    """One op the run used that the target vendor's own CI skips (generated from its test evidence)."""

    op: str
    calls: int
    kind: str  # fails, slow or accuracy (torchferry.device.profile.KNOWN_ISSUE_KINDS)
    reason: str  # the vendor's words
    scope: str  # which of the vendor's tests skip it
    source: str  # the vendor's file(s)


@dataclass
class RehearsalResult:
    """What running on a device that emulates another one predicts about the real device."""

    status: RehearsalStatus = RehearsalStatus.NOT_RUN
    emulates: str = ""  # the emulated device's profile (trn2)
    op_calls: int = 0
    fallback_calls: int = 0
    fallback_share_of_calls: float | None = None
    fallback_share_of_time: float | None = None
    fallbacks: list[HostFallbackOp] = field(default_factory=list)
    known_issues: list[KnownIssueOp] = field(default_factory=list)
    host_syncs_per_step: list[dict] = field(default_factory=list)  # per step: cause -> count
    signatures_step1: int | None = None  # eager op signatures (one NEFF compilation each, cold) in step 1
    new_signatures: list[int] = field(default_factory=list)  # new signatures in steps 2..N
    compilations: int = 0  # signatures the persistent cache lacked (cold compilations) over the run
    cache_hits: int = 0
    shape_changes: list[str] = field(default_factory=list)  # batch inputs whose shape changed between steps
    compile: CompileRehearsal | None = None  # under --compile
    numerics: NumericsRehearsal = field(default_factory=NumericsRehearsal)
    memory: dict = field(default_factory=dict)  # peak_bytes, capacity_bytes, share
    placement: Placement | None = None
    conditions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class VerdictItem:
    result: str
    verdict: Verdict
    reason: str


@dataclass
class NextAction:
    """One thing to do before the move: a condition, failure or stop of ``result``, with its fix."""

    result: str
    action: str


@dataclass
class ScriptFacts:
    """What an unchanged script's reference run showed about the script itself: who seeded it, what it counted, how it
    stopped, and `ferry scan`'s findings of its lines that name CUDA (reported, not a stop: a branch only CUDA takes
    runs unchanged elsewhere)."""

    seeded: str = ""
    optimizer_steps: int = 0
    backward_calls: int = 0
    forward_calls: int = 0  # an inference script's calls of its model (no backward)
    losses: int = 0
    stopped: str | None = None
    scan_findings: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # what became of the files the script writes in its folder


@dataclass
class CheckReport:
    meta: Meta
    environment: dict
    config: dict  # the resolved CheckConfig (check/config.py), as written into the report
    subject: str = ""  # what ran, from where to where: the report's first line
    script: ScriptFacts | None = None  # an unchanged script's facts (None for a build() workload or a named model)
    parity: ParityResult = field(default_factory=ParityResult)
    timing: TimingResult = field(default_factory=TimingResult)
    resume: ResumeResult = field(default_factory=ResumeResult)
    exit: ExitResult = field(default_factory=ExitResult)
    cost: CostResult = field(default_factory=CostResult)
    rehearsal: RehearsalResult = field(default_factory=RehearsalResult)
    verdict: Verdict = Verdict.NOT_RUN
    decision: str = ""  # a no-go's deciding result and figure, in one line (the verdict line carries it)
    verdicts: list[VerdictItem] = field(default_factory=list)
    next_actions: list[NextAction] = field(default_factory=list)  # every condition and failure with its fix
    failure: Failure | None = None  # set when the run stopped early
    progress: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
