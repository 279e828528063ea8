"""The script pipeline of `ferry check -- COMMAND` (check/lifecycle.py's ``Pipeline``): the children and their records.

Order: ``ferry scan``'s findings of code that names CUDA go into the report (guarded branches that only
CUDA takes run unchanged on another device; the runtime catches a script that really trains on
``cuda`` or on ``cpu``); the reference runs (twice when the two sides cannot run the same kernels, for
the reference's own run-to-run spread); then the target. Each run's records go into the report as they
arrive, so a timeout, Ctrl-C or a failure keeps what was measured. A failure on the reference is the
user's error (their traceback); a failure on the target where the reference ran is a finding (no-go) at
the user's file and line. The records (check/script/recorder.py) are judged by check's result modules,
the same modules that judge a built workload: parity, timing, exit, rehearsal and cost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from torchferry.check import convergence, cost, exit as exit_mod, rehearsal, timing
from torchferry.check.config import CheckConfig
from torchferry.check.script import environment
from torchferry.check.script.folder import ScriptFolder
from torchferry.check.script.record import ScriptRecord
from torchferry.check.script.recorder import (
    FLOPS_ENV,
    FLUSH_SIGNAL,
    HOST_DRAWS_ENV,
    KEEP_ENV,
    NOISE_ENV,
    RECORD_ENV,
    SEED_ENV,
    STARTED_ENV,
    STEPS_ENV,
)
from torchferry.errors import (
    DeviceOutOfMemoryError,
    NonFiniteError,
    OutputError,
    StepTimeoutError,
    UsageError,
    WorkloadError,
    low_on_space,
)
from torchferry.harness.prices import load_prices
from torchferry.harness.protocol import T0_ENV
from torchferry.report.check import CheckReport, ParityStatus, RehearsalResult, ScriptFacts, TimingStatus
from torchferry.report.meta import Failure
from torchferry.status import ExitStatus

HARD_CODED = ("TF001", "TF002", "TF006")
OUTPUT_ENV = "TORCHFERRY_CHECK_OUTPUT"  # each run's own folder, for a script that chooses to write its outputs there  # ferry scan's rules for code that names CUDA and fails elsewhere
GRACE_S = 10.0  # SIGTERM -> SIGKILL
STALL_FACTOR, STALL_MIN_S = 3.0, 60.0  # a run after the reference stalls after max(3 x its whole run, 60 s) without a step
FLUSH_WAIT_S = 1.0  # after FLUSH_SIGNAL, how long the children get to write their records


@dataclass
class ChildRun:
    """One run of the command on one device: its exit, its times and the records of its processes."""

    role: str  # ref | noise | target
    device: str
    folder: Path
    log: Path
    returncode: int | None = None
    wall_s: float | None = None
    timed_out: bool = False
    stalled_s: float | None = None  # stopped after this long without a new step (the stall watch)
    records: list[ScriptRecord] = field(default_factory=list)

    def main_record(self) -> ScriptRecord | None:
        """Rank 0's record (or the only process that trained)."""
        ranked = sorted(self.records, key=lambda r: (r.rank or 0, -len(r.losses)))
        return ranked[0] if ranked else None

    def failed_record(self) -> ScriptRecord | None:
        """The record of the process that raised first (under torchrun, the other ranks' errors are collateral: a
        dead peer breaks their collectives); rank 0's when none raised."""
        raised = sorted((r for r in self.records if r.error is not None), key=lambda r: (r.rank is None, r.error.at_s))
        return raised[0] if raised else self.main_record()  # a rank before the launcher, whose error is its ranks'

    def collateral(self, cause: ScriptRecord | None) -> str:
        """The other ranks' failures, named as consequences of ``cause``'s."""
        others = [r for r in self.records if r is not cause and r.error is not None and r.rank is not None]
        if cause is None or cause.rank is None or not others:
            return ""
        return (f" Rank {cause.rank} raised first; then " + "; ".join(
            f"rank {r.rank}: {r.error.type} ({r.error.message.splitlines()[0][:120] if r.error.message else ''})"
            for r in sorted(others, key=lambda r: r.error.at_s)) + " (collateral: a dead peer breaks the collectives).")

    def tensors(self, record: ScriptRecord) -> str | None:
        path = self.folder / f"record-{record.pid}.pt"
        return str(path) if path.is_file() else None

    def curves(self) -> convergence.Curves | None:
        record = self.main_record()
        if record is None:
            return None
        return convergence.Curves(losses=record.losses, grad_norms=record.grad_norms, steps=record.steps,
                                  parameters=record.parameters, buffers=record.buffers, tensors=self.tensors(record),
                                  shapes=record.first_backward_shapes, dtypes=record.first_backward_dtypes,
                                  modules=record.modules, forwards=record.forwards if record.inference else 0)

    def load(self) -> None:
        self.records = [ScriptRecord.from_dict(json.loads(path.read_text()))
                        for path in sorted(self.folder.glob("record-*.json"))]

    @property
    def stopped_by_steps(self) -> bool:
        record = self.main_record()
        return record is not None and (record.stopped or "").startswith("--steps")


def piped_stdin() -> bytes | None:
    """What was piped or redirected into ferry (``echo data | ferry check -- ...``), read once so that every run of the
    command gets it; None when stdin is a terminal, /dev/null or closed (the script then reads from a pipe nobody
    writes, as in a batch job, and a script that waits for input is stopped at --timeout)."""
    import stat

    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    with contextlib.suppress(OSError):
        return os.read(0, 1 << 30) if stat.S_ISREG(mode) else b"".join(iter(lambda: os.read(0, 1 << 16), b""))
    return None


def progress(folder: Path) -> int:
    """Steps, backward calls and (inference) forward calls the run's records hold so far (the recorders rewrite them
    at most every FLUSH_S)."""
    found = 0
    for path in folder.glob("record-*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            found = max(found, record.get("steps", 0) + record.get("backwards", 0) + record.get("forwards", 0))
    return found


def run_child(run: ChildRun, argv: list[str], env: dict[str, str], cwd: Path, timeout: float,
              note: Callable[[str], None], live: set[subprocess.Popen], stdin: Path | None = None,
              stall_s: float | None = None) -> ChildRun:
    """Run the command once, to its end or until ``timeout``; the children write their records, then are stopped.
    The process is in ``live`` while it runs, so that a run that ends early stops it (``stop``). ``stdin``: a file
    the command reads as its standard input (what was piped into ferry). ``stall_s``: stop a run whose records have
    shown no new step for this long, once it has made one (a stall, told apart from a slow start)."""
    run.folder.mkdir(parents=True, exist_ok=True)
    for old in run.folder.glob("record-*"):
        old.unlink()
    env = {**env, RECORD_ENV: str(run.folder), T0_ENV: repr(time.time())}
    started = time.monotonic()
    with open(run.log, "w") as log, open(stdin, "rb") if stdin is not None else contextlib.nullcontext() as given:
        # without piped input, stdin is a pipe never written: a script that reads it waits, as it would in a batch job
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=given if given is not None else subprocess.PIPE, start_new_session=True)
        live.add(proc)
        try:
            run.returncode = watch(proc, run, timeout, stall_s)
            if run.returncode is None and run.stalled_s is not None:
                note(f"[{run.role} {run.device}] no new step for {run.stalled_s:.0f} s: stopping it")
                run.returncode = stop(proc)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            note(f"[{run.role} {run.device}] still running after --timeout {timeout:g} s: stopping it")
            run.returncode = stop(proc)
        except BaseException:  # Ctrl-C (or anything else that stops ferry): stop the command too, keep its records
            stop(proc)
            raise
        finally:
            live.discard(proc)
            run.wall_s = time.monotonic() - started
            run.load()
            if given is None and proc.stdin:
                proc.stdin.close()
    return run


POLL_S = 1.0  # how often the stall watch reads the records


def watch(proc: subprocess.Popen, run: ChildRun, timeout: float, stall_s: float | None) -> int | None:
    """Wait for the run: its exit status; None when it stalled (``run.stalled_s`` set); TimeoutExpired past timeout."""
    if stall_s is None:
        return proc.wait(timeout=timeout)
    deadline, seen, since = time.monotonic() + timeout, 0, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        if (done := progress(run.folder)) > seen:
            seen, since = done, now
        elif seen and now - since > stall_s:
            run.stalled_s = now - since
            return None


def stop(proc: subprocess.Popen) -> int | None:
    """Ask the command's process group to write its records (``FLUSH_SIGNAL``), then SIGTERM it, SIGKILL after a
    grace period: a script that ignores SIGTERM still leaves what it recorded."""
    for sig, wait in ((FLUSH_SIGNAL, FLUSH_WAIT_S), (signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def stall_error(run: ChildRun, ref: ChildRun) -> StepTimeoutError:
    """A run that made no new step for a long time, where the reference ran to its end: where it waited."""
    record, done = run.main_record(), ref.main_record()
    steps = (record.steps or record.backwards) if record else 0
    where = f"; it was waiting at {record.waiting_at}" if record and record.waiting_at else ""
    return StepTimeoutError(f"the {run.role} run on {run.device!r} stalled: no new step for {run.stalled_s:.0f} s after "
                            f"step {steps}, where the reference ran all {(done.steps or done.backwards) if done else '?'} "
                            f"in {ref.wall_s:.0f} s{where}. What it recorded is kept in the report; look at that line on "
                            f"the target (a collective waiting for a peer, a host sync, a data loader).")


def timeout_error(run: ChildRun, timeout: float) -> StepTimeoutError:
    record = run.main_record()
    steps = record.steps if record else 0
    return StepTimeoutError(f"the {run.role} run on {run.device!r} was still running after --timeout {timeout:g} s "
                            f"({steps} optimizer steps recorded; kept in the report). A script that reads stdin or "
                            "waits forever is stopped here; pass --steps N to stop it after N optimizer steps.")


class ScriptPipeline:
    """One `ferry check -- COMMAND` run: its children and the report they fill."""

    def __init__(self, report: CheckReport, cfg: CheckConfig, note: Callable[[str], None]) -> None:
        self.report, self.cfg, self.note = report, cfg, note
        self.source = cfg.script
        self.command = self.source.command
        self.workdir = cfg.workdir
        self.cwd = Path.cwd()
        self.phase = "setup"
        self.runs: dict[str, ChildRun] = {}
        self.live: set[subprocess.Popen] = set()
        self.started = time.time()  # a file older than this in the script's folder is the user's
        self.folder = ScriptFolder(self.cwd, self.workdir)  # each run starts from the files the user had
        self.symptoms: dict[str, str] = {}  # rule id -> the error its finding causes away from its line (scan report)
        data = piped_stdin()
        self.stdin = self.workdir / "stdin" if data is not None else None
        if self.stdin is not None:
            self.stdin.write_bytes(data)
        # the same kernels (the built-in device's are the CPU's) and the same random stream on both sides
        self.exact = self.source.emulates is not None and cfg.ref == "cpu" and not cfg.device_rng
        report.script = ScriptFacts()

    # -- the lifecycle's calls ---------------------------------------------------------------
    def stop(self) -> None:
        """Stop every child still running and keep what the children recorded in the report."""
        for proc in list(self.live):
            stop(proc)
        self.folder.put_back("target")  # the user's folder holds the target's files, whenever the check stopped
        if self.runs:
            self.record_timing()

    def scratch(self) -> list[Path]:
        return [*(p for run in self.runs.values() for p in run.folder.glob("record-*.pt")),
                *(self.workdir / f"{role}-files" for role in ("ref", "noise"))]

    # -- the children ---------------------------------------------------------------------
    def child_env(self, device: str, role: str) -> dict[str, str]:
        builtin = device.split(":")[0] == self.cfg.target.split(":")[0] and self.source.emulates is not None
        env = environment.script_environment(device, os.environ, builtin, one_stream=not self.cfg.device_rng)
        env[SEED_ENV] = str(self.cfg.seed)
        env[KEEP_ENV], env[STARTED_ENV] = str(self.workdir / "overwritten"), repr(self.started)
        env[OUTPUT_ENV] = str(self.workdir / role / "files")  # a script that writes there keeps each run's files apart
        if not builtin and device.split(":")[0] != "cpu" and not self.cfg.device_rng:
            env[HOST_DRAWS_ENV] = "1"  # a real accelerator: its random draws come from the host's stream
        if role == "noise":
            env[NOISE_ENV] = "1"
        if self.source.steps_limit:
            env[STEPS_ENV] = str(self.source.steps_limit)
        if role == "ref":  # its second step's FLOPs, each op run as called (recorder.py's _count_flops)
            env[FLOPS_ENV] = "1"
        return env

    def run_one(self, role: str, device: str, phase: bool = True) -> ChildRun:
        if phase:
            self.phase = role
        argv = self.command.argv_for(device)
        self.note(f"{role} {device}: {' '.join(argv) if self.command.placeholder else self.command.shown()}")
        run = ChildRun(role=role, device=device, folder=self.workdir / role, log=self.workdir / f"{role}.log")
        self.runs[role] = run
        run_child(run, argv, self.child_env(device, role), self.cwd, self.cfg.timeout, self.note, self.live,
                  self.stdin, self.stall_limit(role))
        record = run.main_record()
        done = (f"{record.forwards} calls of the model, no backward (inference)" if record and record.inference else
                f"{record.steps if record else 0} optimizer steps, {len(record.losses) if record else 0} losses")
        self.note(f"{role} {device}: exit status {run.returncode} after {run.wall_s:.1f} s; {done} recorded")
        return run

    def stall_limit(self, role: str) -> float | None:
        """How long a run after the reference may go without a new step: STALL_FACTOR x the reference's whole run, at
        least STALL_MIN_S (a stall on one side is told from a slow run, and named, before --timeout)."""
        ref = self.runs.get("ref")
        if role == "ref" or ref is None or ref.wall_s is None:
            return None
        return max(STALL_MIN_S, STALL_FACTOR * ref.wall_s)

    def run(self) -> None:
        cfg = self.cfg
        ref = self.run_one("ref", cfg.ref)
        self.record_timing()
        if ref.timed_out:
            raise timeout_error(ref, cfg.timeout)
        if ref.returncode != 0 and not ref.stopped_by_steps:
            self.scan_findings()  # a failure at a line that names CUDA is the portability failure scan names
            if (named := self.names_cuda(ref)) is not None:
                self.finding(WorkloadError.slug, named)
                return
        ref_record = self.reference_ok(ref)
        self.script_facts(ref_record)
        self.folder.set_aside("ref", ref.records)
        target = self.run_one("target", cfg.target)
        self.record_timing()
        target_record = target.main_record()
        self.report.rehearsal = rehearsal.result(target_record.rehearsal if target_record else None, cfg,
                                                 self.report.parity)
        if target.timed_out:
            raise timeout_error(target, cfg.timeout)
        if target.stalled_s is not None:
            raise stall_error(target, ref)
        if self.target_failed(target, target_record):
            return
        other_shapes = convergence.shape_difference(ref_record.first_backward_shapes,
                                                    target_record.first_backward_shapes)
        tol = cfg.tolerance.tol if cfg.tolerance.given else None
        exact = None  # where the same kernels ran on the same shapes: the exact judgement, tried first
        why_noise = (f"the script computed on other shapes on the target ({other_shapes}): a library chose them for the "
                     "target's device, so the same kernels sum in another order" if other_shapes else None)
        if self.exact and not other_shapes:
            exact = convergence.judge(ref.curves(), None, target.curves(), True, cfg.tolerance, tol)
            if exact.status not in (ParityStatus.PASS, ParityStatus.NON_FINITE):
                differs = f" ({exact.notes[0]})" if exact.notes else ""
                precision = convergence.precision_difference(ref_record.modules, target_record.modules)
                why_noise = f"the figures are not the reference's bit for bit{differs}: " + (
                    f"the target computes modules in another precision, its autocast policy: {precision}" if precision
                    else "even the same kernels round otherwise on another layout (the device's row-major results; "
                         "docs/device/fidelity.md)")
        if why_noise:
            self.exact = False
            self.note(f"{why_noise}; parity is judged within the reference's own rounding noise")
        saved = exit_mod.checkpoints(target_record.checkpoints)  # listed where the script wrote them, before they move
        self.folder.set_aside("target", target.records)
        # what needs no timing runs side by side: the exit reload, the reference's noise run, the scan
        self.phase = "exit, noise run and scan"
        with ThreadPoolExecutor(max_workers=3) as pool:
            exit_result = pool.submit(self.check_exit, target, target_record, saved)
            noise = pool.submit(self.run_noise) if not self.exact else None
            scanned = pool.submit(self.scan_findings) if not self.report.script.scan_findings else None
            self.report.exit = exit_result.result()
            noise_run = noise.result() if noise is not None else None
            if scanned is not None:
                scanned.result()
        self.note(f"exit: {self.report.exit.status}")
        self.files_left(target)
        self.phase = "parity"
        self.report.parity = exact if self.exact and exact is not None else convergence.judge(
            ref.curves(), noise_run.curves() if noise_run else None, target.curves(), self.exact, cfg.tolerance, tol)
        if why_noise:
            self.report.parity.notes.append(f"not the exact rule: {why_noise}")
        random_ops = target_record.rehearsal.random_ops if target_record.rehearsal else []
        if cfg.device_rng and random_ops:
            self.report.parity.notes.append(f"--device-rng: the target drew its own random numbers "
                                            f"({', '.join(random_ops[:3])}), not the reference's: a difference they "
                                            "make is the stream's, not the device's")
        if not ref_record.script_seeded:
            self.report.parity.notes.append(f"the script does not seed its RNGs: torchferry seeded them at start "
                                            f"(seed {cfg.seed}, Python, NumPy and torch)")
        self.note(f"parity: {self.report.parity.status}")
        if self.report.parity.status == ParityStatus.NON_FINITE:
            self.report.failure = Failure(kind=NonFiniteError.slug, message=self.report.parity.notes[0],
                                          exit_status=int(ExitStatus.NEGATIVE_RESULT), phase="parity", finding=True)
        self.phase = "cost"
        self.report.cost = cost.estimate(self.report.timing, cfg.cost, load_prices(cfg.cost.prices))
        unit = "call of the model" if ref_record.inference else "optimizer step"
        self.report.cost.assumptions.append(
            f"unit: the script's {unit} (torchferry does not know its tokens or samples per step); --volume counts "
            "steps per month")
        self.report.resume.notes.append(
            "an inference script: it trains nothing, so there is nothing to resume" if ref_record.inference else
            "not run for an unchanged script: its own resume code is not called; the exit result reloads the "
            "checkpoints it wrote")
        self.phase = "done"

    def check_exit(self, target: ChildRun, record: ScriptRecord, saved: list[dict]) -> exit_mod.ExitResult:
        """Reload what the target's script wrote (set aside under work/target-files/ meanwhile), on the reference device
        without torchferry."""
        if record.inference and not saved:
            return exit_mod.ExitResult(loader_device=self.cfg.ref, notes=[
                "an inference script: it trains nothing, so there is no checkpoint to carry back"])
        return exit_mod.check_checkpoints(
            saved, [p.digests for p in record.parameters], record.steps, record.stopped, target.device, self.cfg,
            environment.script_environment(self.cfg.ref, {}, False), lambda path: self.folder.where("target", path))

    def files_left(self, target: ChildRun) -> None:
        """Set the noise run's files aside and put the target's back where the script wrote them, and say in the report
        whose files the folder holds, and which files of the user's the script overwrote (copied first)."""
        facts = self.report.script
        if "noise" in self.runs:
            self.folder.set_aside("noise", self.runs["noise"].records)
        if back := self.folder.put_back("target"):
            facts.files.append(f"the checkpoints left where the script writes them are the target's ({target.device}): "
                               + ", ".join(back))
        if self.folder.aside.get("ref"):
            facts.files.append(f"each run started from the files you had: what the reference wrote is in "
                               f"{self.workdir / 'ref-files'}")
        overwritten = sorted({p for run in self.runs.values() for r in run.records for p in r.kept_files})
        if overwritten:
            facts.files.append(f"the script overwrote {len(overwritten)} file(s) that were there before the check: "
                               f"{', '.join(overwritten)}; the originals are in {self.workdir / 'overwritten'}")

    def scan_findings(self) -> None:
        """`ferry scan`'s findings of code that names CUDA, into the report's facts (and next actions): a branch only
        CUDA takes runs unchanged elsewhere, so the script runs; the runtime tells where it really trained."""
        if not self.command.script or self.cfg.target.split(":")[0] == "cuda":
            return
        out = self.workdir / "scan.json"
        subprocess.run([sys.executable, "-m", "torchferry", "scan", self.command.script, "--format", "json",
                        "--select", ",".join(HARD_CODED), "--fail-on", "never", "-o", str(out)],
                       capture_output=True, timeout=self.cfg.timeout,
                       check=False, env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        if out.is_file():
            scanned = json.loads(out.read_text())
            self.report.script.scan_findings = [f for f in scanned["findings"] if f["rule_id"] in HARD_CODED]
            self.symptoms = {r["id"]: r["symptom"] for r in scanned["rules"] if r.get("symptom")}

    def names_cuda(self, run: ChildRun) -> str | None:
        """When a run failed at a line `ferry scan` names as code that only CUDA runs (an error of its, not a guarded
        branch), or with the error such a line causes later (its rule's ``symptom`` in the scan's report: a "gloo"
        process group chosen where CUDA is not fails at the first collective on the accelerator's tensors, in DDP's
        constructor), the portability failure in words, with the scan's fix; else None."""
        record = run.failed_record()
        error = record.error if record else None
        if run.returncode == 0 or error is None or not error.file:
            return None
        at = [f for f in self.report.script.scan_findings if f.get("severity") == "error" and (
              Path(f["path"]).resolve() == Path(error.file).resolve() and f["line"] == error.line
              or self.symptoms.get(f["rule_id"], "\0") in (error.message or ""))]
        if not at:
            return None
        return (f"portability failure: the script names CUDA, so it cannot run on {run.device!r} unchanged: "
                + "; ".join(f"{f['path']}:{f['line']}: {f['rule_id']} {f['message']} Fix: {f['fix']}" for f in at)
                + f" ({error.type}: {error.message.splitlines()[0] if error.message else ''}). "
                + (f"`ferry scan --fix {at[0]['path']}` rewrites the safe ones; then run the check again."
                   if any(f.get("fixable") for f in at) else
                   "No safe rewrite exists for it: change the line as the fix says, then run the check again."))

    def run_noise(self) -> ChildRun:
        """The reference's noise run: every parameter moved by one unit in the last place, every seed kept; how far it
        moves from the reference is the reference's own rounding noise (check/convergence.py)."""
        noise = self.run_one("noise", self.cfg.ref, phase=False)
        if noise.timed_out:
            raise timeout_error(noise, self.cfg.timeout)
        self.reference_ok(noise)
        return noise

    def record_timing(self) -> None:
        """The timing result from the runs so far (called after each, so a stop keeps what ran)."""
        def ends(record: ScriptRecord | None) -> list[float]:
            return [] if record is None else record.ends_s

        def counted(record: ScriptRecord | None) -> range:
            first = record.counted_step if record is not None else None
            return range(first, first + record.steps_counted) if first is not None else range(0)

        def side(run: ChildRun | None) -> timing.DeviceTiming | None:
            record = run.main_record() if run else None
            if run is None:
                return None
            r = record.rehearsal if record else None
            return timing.script_timing(run.device, run.wall_s, ends(record),
                                        record.peak_memory if record else None,
                                        (r.executed_calls, r.fallback_ops) if r is not None and r.read else None,
                                        r.emulates if r is not None else None, counted(record))

        ref, target = self.runs.get("ref"), self.runs.get("target")
        record = ref.main_record() if ref else None
        self.report.timing = timing.summarise(side(ref), side(target), warmed=False,
                                              steps=len(ends(record)) or None)
        if record is not None and record.flops_per_step and self.report.timing.ref is not None:
            for t in (self.report.timing.ref, self.report.timing.target):
                if t is not None:
                    t.flops_per_step = record.flops_per_step  # the reference's count, as on the workload path
            steps = counted(record)
            span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
            self.report.timing.notes.append(
                f"the reference's {span} ran under the FLOP counter (PyTorch's formulas, each op run as called; one step per optimizer that "
                "steps): left out of its step figures, inside its whole-run time")
        elif record is not None and record.flops_skipped:
            self.report.timing.notes.append(f"FLOPs not counted: {record.flops_skipped}")
        if record is not None and not record.steps and record.backwards:
            self.report.timing.step_unit = "backward calls"
            self.report.timing.notes.append("the script steps no optimizer: its steps are its backward calls")
        cut = [run for run in (ref, target) if run is not None and (run.timed_out or run.stalled_s is not None
                                                                    or run.returncode is None)]
        if cut:
            self.report.timing.step_unit += " (cut short)"
            self.report.timing.notes += [f"the {run.role} run was stopped before its end: its time covers the steps it "
                                         "made, not the whole run" for run in cut]
        if target is None or self.report.timing.target is None or self.report.timing.target.time_to_n_s is None:
            self.report.timing.status = TimingStatus.PARTIAL

    def reference_ok(self, run: ChildRun) -> ScriptRecord:
        """The reference's main record; a failing reference is the user's error, with their traceback."""
        record = run.main_record()
        if record is None and low_on_space(self.workdir):
            raise OutputError(f"the disk holding {self.workdir} is full: the {run.role} run's recorders could not write "
                              "what they measured. Free space there, or pass an --output DIR on a disk with room.")
        if run.returncode != 0 and not run.stopped_by_steps:
            failed = run.failed_record()
            error = failed.error if failed else None
            rank = f" (rank {failed.rank})" if failed is not None and failed.rank is not None else ""
            where = f"{rank} at {error.file}:{error.line}" if error and error.file else rank
            trace = error.traceback if error else _tail(run.log)
            if error and error.kind == DeviceOutOfMemoryError.slug:
                raise DeviceOutOfMemoryError(f"the script ran out of memory on the reference {run.device!r}{where}: "
                                             f"{error.message}")
            raise WorkloadError(f"the script failed on the reference {run.device!r}{where} (exit status "
                                f"{run.returncode}): this is the script's own error, not the target's.{run.collateral(failed)}"
                                f" Its output: {run.log}", trace)
        if record is None or not (record.losses or record.inference and record.modules):
            raise UsageError(f"the script neither trains nor runs a model that torchferry could see: no backward() on a "
                             f"scalar loss and no call of an nn.Module was recorded on the reference {run.device!r} "
                             f"({self.command.shown()}). A script that calls only torch.compile'd modules and never "
                             "backward is not traced; check its model with `ferry check --mode forward -w "
                             "path/to/file.py:build` (the build() protocol).")
        if not all(math.isfinite(v) for v in record.losses):
            raise NonFiniteError(f"the script's loss is not finite on the reference {run.device!r}: the script itself "
                                 "is numerically broken")
        used = (record.device or "cpu").split(":")[0]
        if used != run.device.split(":")[0]:
            raise UsageError(f"the reference run trained on {used!r}, not on the reference {run.device!r}: the script "
                             "chooses its device in a way torchferry cannot steer. Let it pick the device with "
                             "torch.accelerator.current_accelerator() (ferry scan shows where it names one).")
        return record

    def script_facts(self, record: ScriptRecord) -> None:
        facts = self.report.script
        facts.seeded = ("by the script" if record.script_seeded else
                        f"by torchferry (seed {self.cfg.seed}): the script does not seed")
        facts.optimizer_steps, facts.backward_calls, facts.losses = record.steps, record.backwards, len(record.losses)
        facts.forward_calls = record.forwards if record.inference else 0
        facts.stopped = record.stopped
        if record.inference:
            self.note("the script does inference (no backward): parity is judged on each module's output at the "
                      "model's first call" + (f"; --steps {self.source.steps_limit} counts optimizer steps or backward "
                                              "calls, so it ran to its end" if self.source.steps_limit else ""))
        elif not record.steps:
            self.note("the script made no optimizer step: parity is judged on the losses it recorded")

    def target_failed(self, run: ChildRun, record: ScriptRecord | None) -> bool:
        """A target that fails where the reference ran is a finding: the user's file and line, the reference's figures."""
        if run.returncode == 0 or run.stopped_by_steps:
            used = ((record.device if record else None) or "cpu").split(":")[0]
            if record and used != run.device.split(":")[0]:
                self.scan_findings()
                self.report.rehearsal = RehearsalResult(notes=[f"not rehearsed: the script never used {run.device!r}, "
                                                               f"it chose {used!r}"])
                self.finding(WorkloadError.slug, f"the script chose {used}: the target run trained on {used!r}, not on "
                                                 f"{run.device!r}, so nothing of the target was checked. "
                                                 + self.device_hint())
                return True
            return False
        self.scan_findings()  # a line that names CUDA may be why (below); and the scan result is the script's
        if (named := self.names_cuda(run)) is not None:
            self.report.parity.status = ParityStatus.FAIL_TO_RUN
            self.report.parity.notes.append(named)
            self.finding(WorkloadError.slug, named)
            return True
        failed = run.failed_record()
        error = failed.error if failed else None
        rank = f" on rank {failed.rank}" if failed is not None and failed.rank is not None and run.records[1:] else ""
        where = f"{rank} at {error.file}:{error.line}: {error.code}" if error and error.file else rank
        kind = error.kind if error else WorkloadError.slug  # a crash without a Python exception is the workload's too
        label = ("portability failure: device placement" if error and error.placement else
                 "out of memory" if kind == DeviceOutOfMemoryError.slug else
                 "missing kernel" if error and error.type == "NotImplementedError" else
                 f"failed ({error.type if error else 'exit'})")
        message = f"{label}{where}: {error.message if error else _tail(run.log)}{run.collateral(failed)}"
        self.report.parity.status = ParityStatus.FAIL_TO_RUN
        self.report.parity.notes.append(message)
        self.finding(kind, message, error.traceback if error else None)
        return True

    def device_hint(self) -> str:
        """Where the script decides its device, for the user to look: the options it takes for a device, and the
        lines `ferry scan` finds falling back to the CPU."""
        import re

        hints = []
        text = Path(self.command.script).read_text(errors="replace") if self.command.script else ""
        flags = sorted(set(re.findall(r"""add_argument\(\s*["'](--[\w-]*(?:device|cpu|cuda|gpu|accel)[\w-]*)""", text)))
        if flags and not self.command.placeholder:
            tokens, flag = list(self.command.given), flags[0]
            if flag in tokens[:-1]:
                tokens[tokens.index(flag) + 1] = "{device}"
            else:
                tokens = [t for t in tokens if not t.startswith(flag + "=")] + [flag, "{device}"]
            hints.append(f"The script takes {', '.join(flags)}: give each side its device with `{{device}}` in the "
                         f"command, e.g. `ferry check -- {' '.join(tokens)}`")
        fallbacks = [f for f in self.report.script.scan_findings if (f.get("guard") or {}).get("fallback_line")]
        if fallbacks:
            hints.append("it falls back to the CPU at " + ", ".join(f"{Path(f['path']).name}:{f['guard']['fallback_line']}"
                                                                  for f in fallbacks[:3])
                         + "; pick the device with torch.accelerator.current_accelerator()")
        return ("; ".join(hints) or "Let the script pick its device with torch.accelerator.current_accelerator() "
                "(ferry scan shows where it names one)") + "."

    def finding(self, kind: str, message: str, trace: str | None = None) -> None:
        self.report.failure = Failure(kind=kind, message=message, exit_status=int(ExitStatus.NEGATIVE_RESULT),
                                      phase=self.phase, finding=True, traceback=trace,
                                      log=str(self.runs[self.phase].log) if self.phase in self.runs else None)
        self.note(f"target failed: {message}")


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""
