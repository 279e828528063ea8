"""The rehearsal result: what a run on a device that emulates another predicts about the real one.

One recorder (``Recorder``, the capture half) writes one typed record (``RehearsalRecord``) for both
sources: in the target worker of a build() workload or named model, and in the user's own process
under `ferry check -- COMMAND` (check/script/recorder.py). It reads the harness's measurement window
when the device says it is a host emulation of another device (``torchferry.harness.devices.emulates``):
per step the new eager op signatures, host syncs and batch shapes (the counts between two step
ends, less the spans the harness excludes: its own work inside the user's process); after the run the
predicted host fallbacks with their reasons, the vendor's known issues among the ops that ran, the
compiled graphs, the peak memory, the ops that drew random numbers, and a placement error with its op
and the user's line (one parser, ``placement_of``, for eager and compiled code). The runner judges that
record (``judge``, ``result``). Conditions (each names what to change):

- predicted host fallbacks (each op with its calls, reason and source);
- known issues: ops the target vendor's own CI skips as failing or slow (kind ``fails`` or ``slow``,
  with the vendor's reason and file). Those of kind ``accuracy`` (results that differ in the vendor's
  op tests, mostly in bfloat16) are listed but are no condition: they name ops nearly every model
  runs (mm, addmm, div, layer norm), the vendor's skip is not a failure of the user's model, and
  parity on the real device is what measures them;
- host syncs for data-dependent output sizes or values, each with the profile's reason where it has one (scalar
  reads such as ``item()`` are shown, not judged);
- shape churn: new eager signatures keep appearing after step 1, in the later half of the steps (each a
  NEFF compilation on the target), named with the batch shapes that changed; new ones in early steps
  only (an optimizer's state created at step 1 and used from step 2) are one-time compilations, noted;
- under ``--compile``, more than one graph per compiled frame, named with the changing input;
- 64-bit narrowing that explains a parity failure (the target reran under host numerics);
- peak memory at or above ``CAPACITY_SHARE`` of one device's capacity.

A placement error fails the rehearsal (a portability failure). Nothing here is a timing: the
emulation's times are the host's.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchferry.check import parity as check_parity
from torchferry.check.config import CheckConfig
from torchferry.device.profile import SCALAR_READS
from torchferry.errors import FerryError
from torchferry.harness.case import Capture
from torchferry.harness.parity import localise
from torchferry.harness.window import HOST_COPY
from torchferry.harness.worker import user_frame
from torchferry.records import Record
from torchferry.report.check import (
    CompiledFrame,
    CompileRehearsal,
    HostFallbackOp,
    KnownIssueOp,
    NumericsRehearsal,
    ParityResult,
    ParityStatus,
    Placement,
    RehearsalResult,
    RehearsalStatus,
)

if TYPE_CHECKING:
    from torchferry.harness.case import ModelCase
    from torchferry.harness.window import Reading

RECORD = "rehearsal-target.json"  # written by the target worker into the work folder
CAPACITY_SHARE = 0.9  # peak memory at or above this share of one device's capacity is a condition
FALLBACK_MARK = " [host fallback]"  # the profiler's name suffix for a host-fallback op
SHOWN = 3  # ops/shapes named in one condition
RANDOM_OPS = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "exponential", "geometric",
              "cauchy", "log_normal", "random_")  # op names that draw from the device's generator


# -- the record ------------------------------------------------------------------------------
@dataclass(kw_only=True)
class StepCounts(Record):
    """One step's predictions: new eager op signatures (one NEFF compilation each, cold), those the persistent cache
    lacked and had, host syncs by cause, and the batch's shapes by name (where the harness knows the batch)."""

    signatures: int
    compilations: int
    cache_hits: int
    host_syncs: dict[str, int]
    inputs: dict[str, list[int]] = field(default_factory=dict)


@dataclass(kw_only=True)
class RehearsalRecord(Record):
    """What the recorder wrote: the run's predictions about the emulated device, judged by ``judge``."""

    emulates: str
    capacity_bytes: int | None
    numerics: str | None
    steps: list[StepCounts] = field(default_factory=list)
    steps_per_iteration: int = 1  # optimizers that step in turn (a GAN's two): the churn rule compares whole iterations
    read: bool = False  # the totals below were read (the run reached its end, or its failure)
    fallback_ops: dict[str, int] = field(default_factory=dict)
    executed_calls: int = 0
    fallback_reasons: dict[str, str] = field(default_factory=dict)
    sync_reasons: dict[str, str] = field(default_factory=dict)  # why an op the target runs syncs the host (profile)
    peak_bytes: int | None = None
    known_issues: list[dict] | None = None
    compile: dict | None = None  # graph_breaks, graphs: the compile backend's records (under --compile)
    device_time_us: dict[str, float] | None = None  # device-op time by op in one profiled step (host fallbacks only)
    random_ops: list[str] = field(default_factory=list)  # ops that ran and draw from a generator
    placement: Placement | None = None


# -- capture (the target worker, or the user's process) ----------------------------------------
def shapes_of(batch: Any) -> dict[str, list[int]]:
    """The batch's tensors' shapes by name (dict keys, tuple indices): what a new input shape changes."""
    items = batch.items() if isinstance(batch, dict) else enumerate(batch) if isinstance(batch, (tuple, list)) else [(0, batch)]
    return {str(k): list(v.shape) for k, v in items if hasattr(v, "shape")}


SCRIPT_COMPILES = "the script's torch.compile"  # the window's compile backend in an unchanged script: whatever it chose
PLACEMENT = re.compile(r"Expected all tensors to be on the same device")
PLACEMENT_OP = re.compile(r"method ([\w:.]+)|call_function (.+)")
TRACED_FRAME = re.compile(r'File "([^"]+)", line (\d+), in \S+\n\s*(\S.*)')  # Dynamo's "from user code:" frames
PLACEMENT_ARG = re.compile(r"argument for argument (\w+)|got (\w+) is on")
PLACEMENT_DEVICES = re.compile(r"devices?, (\S+) and (\S+?)!|is on (\S+), different from other tensors on (\S+?)[ (]")
# TorchNeuron's own refusal of a host tensor where its op needs the device's (python_ops/base.py,
# OperationImplementation.can_handle: an indexed write's CPU mask), with the op where the device names it.
HOST_ARGUMENT = re.compile(r"Non-scalar tensor (arg\d+(?:\[\d+\])?) is on (\w+) device, expected (\w+)(?: \(([\w:.]+):)?")


def placement_of(exc: BaseException) -> Placement | None:
    """The op, devices, argument and user's line of a device-placement error (None for any other error).

    In eager mode the user's line is a frame of the traceback; under torch.compile Dynamo raises
    while tracing and names the traced frames in its message ("from user code:")."""
    message = str(exc)
    host = HOST_ARGUMENT.search(message)
    if not PLACEMENT.search(message) and host is None:
        return None
    traced = TRACED_FRAME.findall(message.split("from user code:", 1)[1]) if "from user code:" in message else []
    if traced:
        file, line, code = traced[-1][0], int(traced[-1][1]), traced[-1][2].strip()
    else:
        frame = user_frame(exc.__traceback__)
        file, line, code = (frame.filename, frame.lineno, frame.line) if frame else (None, None, None)
    if host is not None:
        argument, on, expected, op = host.groups()
        return Placement(op=op or "an op", devices=[expected, on], argument=argument, file=file, line=line, code=code,
                         message=host.group(0).split(" (")[0])
    op, arg, devices = PLACEMENT_OP.search(message), PLACEMENT_ARG.search(message), PLACEMENT_DEVICES.search(message)
    return Placement(op=next(g for g in op.groups() if g).strip() if op else "an op",
                     devices=[d for d in devices.groups() if d] if devices else [],
                     argument=next((a for a in arg.groups() if a), None) if arg else None,
                     file=file, line=line, code=code,
                     message=next(ln.strip() for ln in message.splitlines() if PLACEMENT.search(ln)))


def device_time(step: Callable[[], Any], device: Any) -> dict[str, float]:
    """Device-op time (µs on this host) by op name over one call of ``step`` under torch.profiler, with
    the device's own activity (check/profiling.py ``activities``); host fallbacks carry the
    profiler's `` [host fallback]`` mark."""
    import torch
    from torch.profiler import profile

    from torchferry.check import profiling

    with profile(activities=profiling.activities(device)) as prof:
        step()
    times: dict[str, float] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            times[e.name] = times.get(e.name, 0.0) + float(e.time_range.elapsed_us())
    return times


class Recorder:
    """The capture half, on a device that emulates another: the record ``judge`` reads, written to ``path``.

    One measurement window (torchferry/harness/window.py) stays open from the recorder's start to the end
    of the run. A step's counts are the difference of the window's cheap counters (``Window.counts``)
    between two step boundaries; the harness's own device work inside a user's process (``excluded``) is
    never counted (``Window.uncounted``). The worker pipeline marks a boundary before each timed step
    (``boundary``), so its own work between steps is not counted; the script pipeline does not, so a step
    counts everything from the previous step's end (the script's data loading on the device included).
    After the run (``finish``): the totals, less the spans between boundaries. A placement error is recorded with its op
    and the user's line (``failed``). The record is written atomically whatever ends the run.
    """

    def __init__(self, path: Path | None, device: Any) -> None:
        from torchferry.harness.window import Window

        self.device, self.path = device, path
        # an unchanged script may call torch.compile anywhere: its graphs on the device are read as the worker's are
        self.window = Window(device, SCRIPT_COMPILES, clear=False)
        predictions = self.window.read().predictions
        if predictions is None:
            raise ValueError(f"{device} emulates no other device: there is nothing to rehearse")
        self.record = RehearsalRecord(emulates=predictions.profile, capacity_bytes=predictions.capacity_bytes,
                                      numerics=predictions.numerics)
        self.opened = self.last = self.window.counts()
        self.skipped: list[Any] = []  # the spans before the current step's boundary, not its own
        self.all_skipped: list[Any] = []
        self.write()

    @classmethod
    def start(cls, path: Path | None, device: Any) -> Recorder | None:
        """The recorder when ``device`` emulates another, else None; an earlier run's record at ``path`` goes either way,
        so that the runner never judges a record this run did not write. Without a ``path`` the record is only kept
        in memory (``record``), for a caller that writes it inside its own."""
        from torchferry.harness import devices

        if path is not None:
            path.unlink(missing_ok=True)
        return cls(path, device) if devices.emulates(device) else None

    def excluded(self) -> contextlib.AbstractContextManager[None]:
        """Work inside this context (the harness's own) is not counted."""
        return self.window.uncounted()

    def restart_steps(self) -> None:
        """Forget the steps closed so far: the next ``step`` is step 1 again, counting from the recorder's start."""
        self.record.steps.clear()
        self.last, self.skipped = self.opened, list(self.all_skipped)

    def boundary(self) -> None:
        """A step starts here: what ran since the last step's end is not the next step's."""
        now = self.window.counts()
        self.all_skipped.append(now.minus(self.last, *self.skipped))
        self.last, self.skipped = now, []

    def step(self, inputs: dict[str, list[int]] | None = None) -> None:
        """Close one step: its counts since the last boundary."""
        now = self.window.counts()
        p = now.minus(self.last, *self.skipped)
        self.record.steps.append(StepCounts(signatures=p.signatures, compilations=p.compilations,
                                            cache_hits=p.cache_hits,
                                            host_syncs={k: n for k, n in p.host_syncs.items() if n > 0},
                                            inputs=inputs or {}))
        self.last, self.skipped = now, []

    @contextlib.contextmanager
    def watch(self, batch: Any) -> Iterator[None]:
        """One timed step of the worker pipeline, around which the harness's case runs (ModelCase.step's ``watch``)."""
        self.boundary()
        yield
        self.step(shapes_of(batch))

    def finish(self, profiled_step: Callable[[], Any] | None = None, reading: Reading | None = None) -> None:
        """The run's totals: op counts less the spans between boundaries; reasons, known issues, memory and compiled graphs from
        ``reading`` (the worker's window around its timed run) or this recorder's own window.

        ``profiled_step``: one step of a fresh model, profiled when there are host fallbacks (for their share of
        device-op time; a timed run is never profiled)."""
        own = reading is None  # an unchanged script's: it compiled only if it called torch.compile
        reading = reading or self.window.read()
        ops = self.window.counts().minus(self.opened, *self.all_skipped)
        r, predictions = self.record, reading.predictions
        r.read = True
        r.fallback_ops = {k: n for k, n in ops.fallback.items() if n > 0}
        r.executed_calls = ops.executed
        r.fallback_reasons = {k: v for k, v in (predictions.fallback_reasons if predictions else {}).items()
                              if k in r.fallback_ops}
        synced = {cause for step in r.steps for cause in step.host_syncs}
        r.sync_reasons = {k: v for k, v in (predictions.fallback_reasons if predictions else {}).items()
                          if k in synced and k not in r.fallback_ops}
        r.peak_bytes = reading.memory.bytes
        if predictions is not None and predictions.known_issues is not None:
            r.known_issues = [dict(i) for i in predictions.known_issues]
        module = self.window.module
        seen = {*dict(module.get_executed_ops()), *dict(module.get_fallback_ops())} if self.window.tracks_ops else set()
        r.random_ops = sorted(op for op in seen if any(name in op for name in RANDOM_OPS))
        compiled = reading.compiled
        if compiled is not None and compiled.device_graphs is not None and (compiled.device_graphs or not own):
            r.compile = {"graph_breaks": [{"reason": reason, "count": n} for reason, n in compiled.counted_breaks.items()],
                         "graphs": [{k: g.get(k) for k in ("graph_name", "kind", "compile_id", "input_signature")}
                                    for g in compiled.device_graphs]}
        if r.fallback_ops and profiled_step is not None:
            r.device_time_us = device_time(profiled_step, self.device)
        self.write()

    def failed(self, exc: BaseException | None) -> Placement | None:
        """Record a placement error (the user's code mixing devices: a portability failure, not a crash) with its op
        and the user's line; None for any other failure."""
        placement = placement_of(exc) if exc is not None else None
        if placement is not None:
            self.record.placement = placement
            self.write()
        return placement

    def write(self) -> None:
        from torchferry.report.core import write_atomic

        if self.path is not None:
            write_atomic(self.path, json.dumps(self.record.to_dict()))


def portability_failure(placement: Placement, message: str) -> str:
    """A failure's message when the user's code mixes devices: the op and the user's line first."""
    return f"portability failure: {placement.op} at {placement.file}:{placement.line} (`{placement.code}`): {message}"


def host_numerics_capture(case: ModelCase, model: Any, compile_backend: str | None, tensors: str) -> str:
    """The ``numerics`` role: the target's run and probe once more, in a process started with host numerics
    (64-bit values kept at 64 bits), saved to ``tensors``, so that ``explain_numerics`` can tell whether the
    target's 32-bit narrowing explains a parity failure. ``model``: a fresh copy on the device. Returns the
    numerics the device ran under."""
    from torchferry.device import numerics

    run, _ = case.run(case.timed(model, compile_backend))  # one process: compiled as the timed run was
    Capture(run=run, probe=case.probe()).save(tensors)
    return numerics()


# -- judge (the runner) -----------------------------------------------------------------------
def load(path: Path) -> RehearsalRecord | None:
    """A recorder's record, or None when none was written (the target is not an emulation)."""
    return RehearsalRecord.from_dict(json.loads(path.read_text())) if path.is_file() else None


def needs_host_numerics(record: RehearsalRecord, parity: ParityResult) -> bool:
    """Whether parity failed under the target's numerics, so that a rerun under host numerics can tell why."""
    return record.numerics == "target" and parity.status in (ParityStatus.FAIL_ACCURACY, ParityStatus.NON_FINITE)


def explain_numerics(cfg: CheckConfig, ref: Capture, target: Capture, host: Capture) -> NumericsRehearsal:
    """Whether 64-bit narrowing explains the parity failure: the host-numerics rerun ``host`` against the
    reference, and the first module whose output narrowing changes (target vs host numerics)."""
    tol = cfg.tolerance
    again = check_parity.judge(cfg.workload.mode, tol, ref, host, None)
    _, first = localise(host.probe.modules, target.probe.modules, ref.golden.probe.modules, tol.tol, tol.low_precision)
    explains = again.status == ParityStatus.PASS
    note = ("parity passes under host numerics: the target's 32-bit arithmetic on 64-bit values explains the failure"
            if explains else f"parity fails under host numerics too ({again.status}): 64-bit narrowing does not explain it")
    return NumericsRehearsal(mode="target", rerun=True, host_parity=str(again.status), explains=explains,
                             first_diverging_module=first.name if first else None, note=note)


NOT_EMULATED = "the target does not emulate another device: nothing to rehearse"


def result(record: RehearsalRecord | None, cfg: CheckConfig, parity: ParityResult, ref: Capture | None = None,
           target: Capture | None = None, rerun: Callable[[], Capture] | None = None) -> RehearsalResult:
    """The rehearsal result of this run (not-run when the target is no emulation). ``rerun`` runs the target
    under host numerics and returns its tensors; it is called only when parity failed under target numerics."""
    if record is None:
        return RehearsalResult(notes=[NOT_EMULATED])
    numerics = None
    if rerun is not None and ref is not None and target is not None and needs_host_numerics(record, parity):
        try:
            numerics = explain_numerics(cfg, ref, target, rerun())
        except FerryError as error:  # the finding stands; only its explanation is missing
            numerics = NumericsRehearsal(mode="target", rerun=True, note=f"the host-numerics rerun failed: {error}")
    return judge(record, numerics)


def judge(record: RehearsalRecord, numerics: NumericsRehearsal | None = None) -> RehearsalResult:
    """The rehearsal result from the worker's record (and the host-numerics explanation, when one ran)."""
    r = RehearsalResult(emulates=record.emulates)
    r.numerics = numerics or NumericsRehearsal(mode=record.numerics or "")
    _fallbacks(r, record)
    _known_issues(r, record)
    _eager(r, record.steps, record.steps_per_iteration, record.sync_reasons)
    if record.compile is not None:
        _compiled(r, record.compile)
    _memory(r, record)
    if r.numerics.explains:
        r.conditions.append(
            f"64-bit narrowing changes the results: parity fails under {r.emulates} numerics (int64 computed as int32, "
            f"float64 as float32) and passes under host numerics; first module it changes: "
            f"{r.numerics.first_diverging_module or 'none named'}. Keep such values within 32 bits, or compute them "
            "on the host")
    r.placement = record.placement
    r.status = (RehearsalStatus.FAIL if r.placement else RehearsalStatus.CONDITIONS if r.conditions
                else RehearsalStatus.CLEAN)
    return r


def _fallbacks(r: RehearsalResult, record: RehearsalRecord) -> None:
    ops = record.fallback_ops
    if not record.read:
        r.notes.append("the run ended before the op counts were read")
        return
    r.fallback_calls = sum(ops.values())
    r.op_calls = record.executed_calls + r.fallback_calls
    r.fallback_share_of_calls = r.fallback_calls / r.op_calls if r.op_calls else 0.0
    times = record.device_time_us
    total = sum(times.values()) if times else 0.0
    reasons = record.fallback_reasons
    for op, calls in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
        share_t = times.get(op + FALLBACK_MARK, 0.0) / total if times and total else None
        r.fallbacks.append(HostFallbackOp(op=op, calls=calls, share_of_calls=calls / r.op_calls, share_of_time=share_t,
                                          reason=reasons.get(op, "")))
    if times is not None and total:
        r.fallback_share_of_time = sum(v for k, v in times.items() if k.endswith(FALLBACK_MARK)) / total
        r.notes.append("share of time: of device-op time in one profiled step of a fresh model on this host "
                       "(the emulation's time, not the target's)")
    if r.fallbacks:
        named = ", ".join(f"{f.op} x{f.calls}" for f in r.fallbacks[:SHOWN])
        more = f" and {len(r.fallbacks) - SHOWN} more" if len(r.fallbacks) > SHOWN else ""
        r.conditions.append(f"{len(r.fallbacks)} op(s) predicted to run on the host on {r.emulates} "
                            f"({r.fallback_calls} calls, {r.fallback_share_of_calls:.2%} of calls): {named}{more}; "
                            "each op's reason and source are in the rehearsal section")


CONDITION_KINDS = ("fails", "slow")  # known-issue kinds that make a condition (see the module docstring)


def _known_issues(r: RehearsalResult, record: RehearsalRecord) -> None:
    r.known_issues = [KnownIssueOp(op=k["op"], calls=k["calls"], kind=k["kind"], reason=k["reason"], scope=k["scope"],
                                   source=k["source"]) for k in record.known_issues or []]
    hard = [k for k in r.known_issues if k.kind in CONDITION_KINDS]
    if hard:
        named = ", ".join(f"{k.op} x{k.calls} ({k.reason})" for k in hard[:SHOWN])
        more = f" and {len(hard) - SHOWN} more" if len(hard) > SHOWN else ""
        r.conditions.append(f"known issues: {len(hard)} op(s) that TorchNeuron's own CI skips as failing or slow: "
                            f"{named}{more}; test them on the real device or avoid them (sources in the rehearsal "
                            "section)")
    soft = [k.op for k in r.known_issues if k.kind not in CONDITION_KINDS]
    if soft:
        r.notes.append(f"known accuracy issues (TorchNeuron's op tests skip them for differing results; no condition): "
                       f"{', '.join(soft)}")


def _eager(r: RehearsalResult, steps: list[StepCounts], per_iteration: int = 1,
           sync_reasons: dict[str, str] | None = None) -> None:
    if not steps:
        return
    if per_iteration > 1:  # optimizers that step in turn: one iteration is one step of each
        steps = [StepCounts(signatures=sum(s.signatures for s in group), compilations=sum(s.compilations for s in group),
                            cache_hits=sum(s.cache_hits for s in group),
                            host_syncs={k: sum(s.host_syncs.get(k, 0) for s in group) for g in group for k in g.host_syncs},
                            inputs=group[-1].inputs)
                 for group in (steps[i:i + per_iteration] for i in range(0, len(steps), per_iteration))]
    r.host_syncs_per_step = [s.host_syncs for s in steps]
    r.signatures_step1 = steps[0].signatures
    r.new_signatures = [s.signatures for s in steps[1:]]
    r.compilations = sum(s.compilations for s in steps)
    r.cache_hits = sum(s.cache_hits for s in steps)
    r.shape_changes = shape_changes([s.inputs for s in steps])
    data_dependent: dict[str, int] = {}
    for syncs in r.host_syncs_per_step:
        for cause, n in syncs.items():
            if cause not in SCALAR_READS and not cause.endswith(HOST_COPY):  # copies are shown, not judged
                data_dependent[cause] = data_dependent.get(cause, 0) + n
    if data_dependent:
        why = sync_reasons or {}
        named = ", ".join(f"{cause} x{n / len(steps):g}/step" + (f" ({why[cause]})" if cause in why else "")
                          for cause, n in sorted(data_dependent.items()))
        r.conditions.append(f"host syncs for data-dependent output sizes or values: {named}; each step waits for the "
                            "host to read them. Use fixed-size masks (torch.where) instead of data-dependent sizes")
    later = r.new_signatures
    growing = sum(1 for n in later if n)
    if short := short_last_batch(steps, later):
        r.notes.append(f"the last batch is smaller ({short}): its new shapes are {later[-1]} more eager compilations "
                       f"on {r.emulates}, once. Pass drop_last=True to the DataLoader, or pad the last batch, to avoid "
                       "them")
        later, growing = later[:-1], growing - 1
    late = later[len(later) // 2:]  # the later half of the steps: past the optimizer's and the script's first paths
    if growing and not any(late):
        from torchferry.report.text import series

        r.notes.append(f"new eager op signatures in {growing} of {len(later)} steps after step 1 "
                       f"({series(later, first_step=2)}) and none in the later half: compilations on {r.emulates} once, "
                       "as code paths first run (an optimizer's state, an EMA's update), not churn")
    elif any(late) and (later[-1] or growing >= 2):
        changed = "; ".join(r.shape_changes[:SHOWN]) or (
            "no batch shape changed: the new shapes come from inside the model (data-dependent shapes)")
        from torchferry.report.text import series

        r.conditions.append(f"shape churn: new eager op signatures in {growing} of {len(later)} steps after step 1 "
                            f"({series(later, first_step=2)}), each a NEFF compilation on {r.emulates}; changing: "
                            f"{changed}. Pad inputs to a few fixed shapes (buckets)")


def short_last_batch(steps: list[StepCounts], later: list[int]) -> str | None:
    """``"input 0: [16, 64] -> [8, 64]"`` when only the last step brought new signatures and its batch has fewer rows
    than every step before (a DataLoader's short last batch), else None."""
    if len(steps) < 3 or not later or not later[-1] or any(later[:-1][1:]):
        return None
    last, before = steps[-1].inputs, [s.inputs for s in steps[:-1]]
    for name, shape in last.items():
        earlier = [b[name] for b in before if name in b]
        if shape and earlier and all(e and e[1:] == shape[1:] and e[0] > shape[0] for e in earlier):
            return f"{name}: {earlier[-1]} -> {shape}"
    return None


def shape_changes(inputs: list[dict[str, list[int]]]) -> list[str]:
    """``"name: [2, 8] -> [2, 12]"`` for each batch input whose shape changes over the steps (distinct shapes, in order)."""
    changes = []
    for name in inputs[0] if inputs else []:
        seen: list[list[int]] = []
        for step in inputs:
            if name in step and step[name] not in seen:
                seen.append(step[name])
        if len(seen) > 1:
            changes.append(f"{name}: {' -> '.join(map(str, seen))}")
    return changes


def split_signature(signature: str) -> list[str]:
    """A graph input signature (``"neuron:float32[2, 8], neuron:int64[2]"``) split into its inputs."""
    parts, depth, current = [], 0, ""
    for ch in signature:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + ([current.strip()] if current.strip() else [])


def _compiled(r: RehearsalResult, record: dict[str, Any]) -> None:
    graphs = record["graphs"]
    c = CompileRehearsal(graphs=len(graphs), graph_breaks=record["graph_breaks"])
    if not graphs:
        r.notes.append("no compiled graph reached the device's own compile backend, which is where the graph counts "
                       "come from: pass --compile with the device's backend to rehearse its graphs")
    by_frame: dict[str, dict[str, str]] = {}  # frame -> compile id -> input signature
    for g in graphs:
        if g.get("compile_id") and g["kind"] != "backward":  # a backward graph belongs to its forward's compilation
            frame = g["compile_id"].split("/")[0]
            by_frame.setdefault(frame, {}).setdefault(g["compile_id"], g.get("input_signature") or "")
    for frame, ids in sorted(by_frame.items()):
        signatures = [split_signature(s) for s in ids.values()]
        changing = []
        for i in range(max(map(len, signatures))):
            values: list[str] = []
            for sig in signatures:
                value = sig[i] if i < len(sig) else "(absent)"
                if value not in values:
                    values.append(value)
            if len(values) > 1:
                changing.append(f"graph input {i}: {' -> '.join(values)}")
        c.frames.append(CompiledFrame(frame=frame, graphs=len(ids), recompiles=len(ids) - 1, changing_inputs=changing))
    r.compile = c
    for f in c.frames:
        if f.graphs > 1:
            batch = f"; batch: {'; '.join(r.shape_changes[:SHOWN])}" if r.shape_changes else ""
            r.conditions.append(f"compiled frame {f.frame} has {f.graphs} graphs ({f.recompiles} recompiles), one per input "
                                f"signature; changing: {'; '.join(f.changing_inputs[:SHOWN]) or 'guards only'}{batch}. "
                                "Pad inputs to a few fixed shapes (buckets): each graph is a compilation on the target")


def _memory(r: RehearsalResult, record: RehearsalRecord) -> None:
    peak, capacity = record.peak_bytes, record.capacity_bytes
    if peak is None or not capacity:
        return
    r.memory = {"peak_bytes": peak, "capacity_bytes": capacity, "share": peak / capacity}
    if peak >= CAPACITY_SHARE * capacity:
        r.conditions.append(f"peak device memory {peak / 2**30:.2f} GiB is {peak / capacity:.0%} of one {r.emulates} "
                            f"device's {capacity / 2**30:.0f} GiB: little headroom on one logical core")
