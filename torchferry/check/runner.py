"""Runs each device in its own worker process and fills the one result model as results arrive.

Order: reference worker (timed run, second run for determinism, fp64 golden run), target
worker (timed run, mid-run resume checkpoint, exit checkpoints), steady-state repetitions
interleaved across the two live workers, a fresh target process that resumes, then the
torchferry-free exit loader. Each phase's result goes into the report the moment it arrives,
so whatever ends the run, everything measured before is in the report. ``phase`` says what
was in progress.

Under ``--nproc N`` (or ``--nnodes``) the target is one ``torch.distributed.run`` launcher
(torchferry.harness.launch) whose ranks are spoken to as a group: every command goes to rank 0,
which broadcasts it, and a rank that fails or stops answering fails the group within a grace
period instead of leaving the others waiting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from torchferry.check import cost, exit as exit_mod, parity, rehearsal, resume, timing
from torchferry.check.config import CheckConfig
from torchferry.check.worker import WorkerJob, WorkerSummary
from torchferry.errors import (
    DeviceOutOfMemoryError,
    DeviceUnavailableError,
    FerryError,
    OutputError,
    StepTimeoutError,
    UsageError,
    WorkloadError,
    from_kind,
    low_on_space,
)
from torchferry.harness import devices, launch
from torchferry.harness.case import Capture
from torchferry.harness.modes import Mode
from torchferry.harness.prices import load_prices
from torchferry.harness.protocol import WorkerProcess, python_module, run_to_end, worker_env
from torchferry.report.check import CheckReport, ParityStatus, ResultStatus, TimingStatus
from torchferry.report.meta import Failure

WORKER = "torchferry.check.worker"
WARM = "torchferry.check.warm"
GRACE_S = 10.0  # after one rank fails, how long the others get to report (a dead peer breaks their collectives)


def to_error(label: str, device: str, event: dict, workdir: Path | None = None) -> FerryError:
    """The typed error for a worker's failure event; a worker that died while ``workdir``'s disk is full died of it."""
    if event["event"] == "crash" and workdir is not None and low_on_space(workdir):
        return OutputError(f"the {label} process on {device!r} died (exit status {event.get('returncode')}) while the disk "
                           f"holding {workdir} is full. Free space there, or pass an --output DIR on a disk with room.")
    if event["event"] == "crash":
        code = event.get("returncode")
        return WorkloadError(f"the {label} process on {device!r} died (exit status {code}) before reporting: "
                             f"{event['message']}")
    message = f"on the {label} device {device!r}: {event['message']}"
    if event["kind"] == DeviceOutOfMemoryError.slug:
        message += ". Use a smaller --size or --batch-size."
    return from_kind(event["kind"], message, event.get("traceback"))


class Group:
    """The target's ranks in one launcher (or one plain worker when the world is 1)."""

    def __init__(self, proc: WorkerProcess, device: str, ranks: int, timeout: float) -> None:
        self.proc, self.device, self.ranks, self.timeout = proc, device, ranks, timeout

    def label(self, rank: int) -> str:
        return self.proc.label if self.ranks == 1 else f"{self.proc.label} rank {rank}"

    def gather(self, *wanted: str, phase: str) -> list[dict]:
        """Each rank's next event among ``wanted``; a typed error naming the failed rank and every other rank's state."""
        if self.ranks == 1:
            event = self.proc.wait(*wanted, timeout=self.timeout, phase=phase)
            if event["event"] not in wanted:
                raise to_error(self.label(0), self.device, event, self.proc.log.parent)
            return [event]
        events: dict[int, dict] = {}
        first: int | None = None
        deadline = time.monotonic() + self.timeout
        while len(events) < self.ranks:
            for rank in range(self.ranks):
                if rank not in events and (event := self.proc.poll(*wanted, within=0.05, rank=rank)) is not None:
                    events[rank] = event
                    if first is None and event["event"] not in wanted:
                        first, deadline = rank, min(deadline, time.monotonic() + GRACE_S)
            if time.monotonic() > deadline:
                silent = [r for r in range(self.ranks) if r not in events]
                self.proc.kill()
                if first is None:
                    raise StepTimeoutError(
                        f"{', '.join(self.label(r) for r in silent)} on {self.device!r} gave no result within "
                        f"{self.timeout:g} s ({phase}); the launcher's process group was killed. Raise --timeout, or "
                        f"use a smaller --size/--steps; log: {self.proc.log}.")
                for r in silent:
                    events[r] = {"event": "hang", "message": f"no answer {GRACE_S:g} s after {self.label(first)} failed; killed"}
        if first is None:
            return [events[r] for r in range(self.ranks)]
        codes, root = launch.exit_codes(self.proc.log)
        for rank, event in events.items():
            if event["event"] == "crash":
                event["returncode"] = codes.get(rank, event.get("returncode"))
        crashed = [r for r in range(self.ranks) if events[r]["event"] == "crash"]
        cause = root if root in crashed else crashed[0] if crashed else first  # a dead rank fails its peers
        others = "; ".join(f"{self.label(r)}: {state(events[r])}" for r in range(self.ranks) if r != cause)
        raise to_error(self.label(cause), self.device, {**events[cause],
                                                        "message": f"{events[cause]['message']} [other ranks: {others}]"},
                       self.proc.log.parent)


def state(event: dict) -> str:
    """One rank's outcome in a few words, for a group failure's message."""
    if event["event"] == "crash":
        return f"died (exit status {event.get('returncode')})"
    if event["event"] == "hang":
        return event["message"]
    if event["event"] == "error":
        return f"{event['type']}: {event['message'].splitlines()[0] if event['message'] else ''}"
    return "finished"


# docs/check/parity.md, "Random numbers": what a generator that differs from the reference's means for parity
RNG_DIFFERS = ("the target's generator drew other numbers than the reference's for the same seed (--device-rng: "
               "its own stream, as a real Trainium's): a model with dropout or other random ops cannot match the "
               "reference step by step there, and a training mismatch may be the draws, not the device. Judge such a "
               "model without --device-rng (one stream), with --mode forward (eval mode, no draws), or with its dropout "
               "set to 0")


class Runner:
    """The worker pipeline of a build() workload or a named model (check/lifecycle.py's ``Pipeline``): fills
    ``report`` phase by phase; raises a FerryError (report kept) when a phase cannot go on."""

    def __init__(self, report: CheckReport, cfg: CheckConfig, note: Callable[[str], None]) -> None:
        self.report, self.cfg, self.note = report, cfg, note
        self.source = cfg.workload
        self.workdir = cfg.workdir  # job files, worker logs, tensors and checkpoints
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.phase = "start"
        self.live: list[WorkerProcess] = []
        self.rounds_run = 0  # steady-state rounds run, those added while unstable included

    def progress(self, role: str, rank: int, message: str) -> None:
        device = self.cfg.ref if role == "ref" else self.cfg.target
        ranks = f" rank {rank}" if role == "target" and self.source.world > 1 else ""
        self.note(f"[{role}{ranks} {device}] {message}")

    def spawn(self, role: str, device: str) -> Group:
        """A worker for ``role`` on ``device``: one process, or the target's launcher with its ranks."""
        job = self.workdir / f"job-{role}.json"
        tensors = self.workdir / f"{role}.pt"
        tensors.unlink(missing_ok=True)
        job.write_text(json.dumps(WorkerJob(role=role, device=device, config=self.cfg, outdir=str(self.workdir),
                                            tensors=str(tensors)).to_dict()))
        src = self.source
        world = src.world if role == "target" else 1
        if world == 1:
            argv, launcher = python_module(WORKER, str(job)), False
        else:
            argv = [*launch.launcher_args(src.nproc, src.nnodes, src.rdzv_endpoint), "-m", WORKER, str(job)]
            launcher = True
            if src.nnodes > 1:
                self.note(f"target: waiting for {src.nnodes - 1} more node(s); on node K (1..{src.nnodes - 1}) "
                          f"run: {launch.other_node_command(src.nproc, src.nnodes, src.rdzv_endpoint, WORKER, job)}")
        # one random stream: the built-in device draws from the CPU's generator (a real one draws on the host: worker.py)
        stream = {k: v for table in devices.ONE_STREAM.values() for k, v in table.items()} if not self.cfg.device_rng else {}
        proc = WorkerProcess("reference" if role == "ref" else role, argv, self.workdir / f"{role}.log",
                             env=worker_env(stream),
                             cwd=self.workdir, ranks=range(src.nproc if launcher else 1), launcher=launcher,
                             on_progress=lambda _label, rank, message: self.progress(role, rank, message))
        self.live.append(proc)
        return Group(proc, device, src.nproc if launcher else 1, self.cfg.timeout)

    def close_all(self) -> None:
        """Ask every worker still running to quit (their process groups are killed if they do not)."""
        for proc in self.live:
            proc.close(grace=10)
        self.live.clear()

    def kill_all(self) -> None:
        """Kill every worker's process group at once (the run is stopping)."""
        for proc in self.live:
            proc.kill()
        self.live.clear()

    def stop(self) -> None:
        """The run is ending: stop every worker now (each phase's result is already in the report)."""
        self.kill_all()

    def scratch(self) -> list[Path]:
        """This run's scratch tensors and checkpoints (work/*.pt, work/resume, work/exit), spent once the workers are
        stopped."""
        return [*self.workdir.glob("*.pt"), resume.checkpoint(self.workdir).parent, exit_mod.folder(self.workdir)]

    def run(self) -> None:
        cfg, src = self.cfg, self.source
        (self.workdir / rehearsal.RECORD).unlink(missing_ok=True)  # judge only a record this run wrote
        try:
            self.phase = "warm-up"
            self.warm()
            self.phase = "reference"
            self.note(f"reference {cfg.ref}: starting")
            ref = self.spawn("ref", cfg.ref)
            self.check_split(ref.gather("batch", phase="reference setup")[0]["rows"])  # before its first step
            ref_summary = WorkerSummary.from_dict(ref.gather("result", phase="reference run")[0]["data"])
            self.report.timing = timing.summarise(timing.device_timing(cfg.ref, ref_summary.timing, []), None,
                                                  src.warm_up)
            self.phase = "target"
            world = src.world
            self.note(f"target {cfg.target}: starting" + (f" {world} DDP ranks" if world > 1 else ""))
            target = self.spawn("target", cfg.target)
            try:
                target_summaries = [WorkerSummary.from_dict(e["data"]) for e in target.gather("result", phase="target run")]
            except (DeviceUnavailableError, DeviceOutOfMemoryError, UsageError, StepTimeoutError, OutputError):
                raise  # errors that stop the run, not findings about the target
            except FerryError as error:  # the target fails where the reference ran: a finding
                self.target_failed(error, ref_summary)
                self.close_all()
                return
            target_summary = target_summaries[0]
            self.set_timing(ref_summary, target_summaries, None)
            self.phase = "steady state"
            groups = {"ref": ref, "target": target}
            # an emulated target's times decide nothing: no rounds are added for them
            steady = self.interleave(groups, extend=not target_summary.timing.emulates)
            self.set_timing(ref_summary, target_summaries, steady)
            if src.trace:
                self.phase = "trace"
                self.trace(groups, offset=self.rounds_run * src.reps)
        except BaseException:  # a timeout, Ctrl-C, a bug: stop every worker now, not after a grace period
            self.kill_all()
            raise
        self.close_all()
        self.phase = "parity"
        ref_tensors = self.load_tensors("ref")
        target_tensors = self.load_tensors("target")
        self.report.parity = parity.judge(src.mode, cfg.tolerance, ref_tensors, target_tensors, ref_summary.determinism)
        if ref_summary.rng_draws != target_summary.rng_draws:
            self.report.parity.notes.append(RNG_DIFFERS)
        self.note(f"parity: {self.report.parity.status}")
        self.phase = "rehearsal"
        self.report.rehearsal = rehearsal.result(rehearsal.load(self.workdir / rehearsal.RECORD), cfg,
                                                 self.report.parity, ref_tensors, target_tensors,
                                                 rerun=self.host_numerics_rerun)
        self.phase = "cost"
        self.report.cost = cost.estimate(self.report.timing, cfg.cost, load_prices(cfg.cost.prices))
        self.phase = "resume"
        self.check_resume(target_tensors)
        self.phase = "exit"
        self.check_exit(target_summary.exit, target_tensors.eval_outputs)
        self.phase = "done"

    def warm(self) -> None:
        """Import and build everything once in a throwaway process, so that neither timed worker pays a cold page
        cache (the reference starts first and would pay it alone)."""
        cfg, src = self.cfg, self.source
        if not src.warm_up:
            self.note("warm-up: skipped (TORCHFERRY_CHECK_WARMUP=0)")
            return
        job = self.workdir / "job-warm.json"
        job.write_text(json.dumps({"devices": [cfg.ref, cfg.target], "workload": src.spec,
                                   "options": src.workload_options(), "source": src.resolved}))
        started = time.monotonic()
        code = run_to_end(python_module(WARM, str(job)), self.workdir / "warm.log", timeout=cfg.timeout,
                          env=worker_env(), cwd=self.workdir)
        self.note(f"warm-up: imports and workload build read once ({time.monotonic() - started:.1f} s"
                  + (f"; it failed with exit status {code}, the timed workers will report why)" if code else ")"))

    def load_tensors(self, role: str) -> Capture:
        """A worker's capture, from the path this runner chose, loaded without unpickling code."""
        return Capture.load(self.workdir / f"{role}.pt")

    def host_numerics_rerun(self) -> Capture:
        """The target in a fresh process under host numerics (worker role ``numerics``): its tensors."""
        self.note(f"rehearsal: parity failed under target numerics; rerunning {self.cfg.target} under host numerics")
        worker = self.spawn("numerics", self.cfg.target)
        try:
            worker.gather("result", phase="host-numerics rerun")
        finally:
            self.kill_all()
        return self.load_tensors("numerics")

    def check_split(self, rows: int | None) -> None:
        """The batch must split into equal shards over the target's ranks: checked when the reference worker has built
        its first batch (the workload's build() chooses its default size), before it runs a step."""
        world = self.source.world
        if world > 1 and rows is not None and rows % world:
            raise UsageError(f"the batch size {rows} does not split into --nproc {world} equal shards. "
                             f"Pass a --batch-size that is a multiple of {world}.")

    def set_timing(self, ref_summary: WorkerSummary, targets: list[WorkerSummary], steady: dict | None) -> None:
        cfg, src, flops = self.cfg, self.source, ref_summary.timing.flops_per_step
        steady = steady or {"ref": [[]], "target": [[] for _ in targets]}
        world = src.world
        self.report.timing = timing.summarise(
            timing.device_timing(cfg.ref, ref_summary.timing, steady["ref"][0]),
            timing.device_timing(cfg.target, targets[0].timing, steady["target"][0], rank=0 if world > 1 else None,
                                 flops_per_step=flops),
            src.warm_up, steps=src.steps,
        )
        if world > 1:
            self.report.timing.ranks = [
                timing.device_timing(summary.device, summary.timing, times, rank=rank, flops_per_step=flops)
                for rank, (summary, times) in enumerate(zip(targets, steady["target"]))]
            self.report.timing.notes.append(
                f"target: DDP over {world} processes (torch.distributed.run), each on 1/{world} of every batch; its "
                f"figures are rank 0's (ranks meet at every step's gradient all-reduce), each local rank's are listed")
        if not any(steady["ref"]):
            self.report.timing.status = TimingStatus.PARTIAL
        elif self.rounds_run > src.rounds:
            self.report.timing.notes.append(
                f"steady state: the latest {src.rounds} of {self.rounds_run} interleaved rounds; rounds were added while "
                f"the figures were unstable (--steady-budget {src.steady_budget:g} s)")

    def target_failed(self, error: FerryError, ref_summary: WorkerSummary) -> None:
        """A target that fails where the reference ran is a finding (no-go), not a stopped run."""
        kind = ParityStatus.NON_FINITE if error.slug == "non-finite" else ParityStatus.FAIL_TO_RUN
        self.report.parity.status = kind
        self.report.parity.notes.append(str(error))
        self.report.timing = timing.summarise(timing.device_timing(self.cfg.ref, ref_summary.timing, []),
                                              timing.device_timing(self.cfg.target, timing.StepFigures(), []),
                                              self.source.warm_up, steps=self.source.steps)
        self.report.timing.status = TimingStatus.PARTIAL
        self.report.rehearsal = rehearsal.result(rehearsal.load(self.workdir / rehearsal.RECORD), self.cfg,
                                                 self.report.parity)
        self.report.failure = Failure(kind=error.slug, message=str(error), exit_status=3, phase=self.phase, finding=True,
                                      traceback=getattr(error, "user_traceback", None), log=str(self.workdir / "target.log"))
        self.note(f"target failed: {error}")

    def interleave(self, groups: dict[str, Group], extend: bool) -> dict[str, list[list[list[float]]]]:
        """Steady-state repetitions, alternating devices each round (ABBA) to share drift and load.

        After ``--rounds``, while ``extend`` and a device's figures are unstable (timing.stability),
        rounds are added until the latest ``--rounds`` rounds are stable or the next round would overrun
        ``--steady-budget``; the steady state is then those latest rounds (a disturbed early round would
        otherwise keep the spread high for ever). Returns role -> rank -> rounds of times, the same rounds
        for every role; all ranks of a role step together. ``self.rounds_run`` counts every round run.
        """
        cfg = self.source
        steady = {role: [[] for _ in range(group.ranks)] for role, group in groups.items()}
        self.note(f"steady state: {cfg.rounds} interleaved rounds x {cfg.reps} repetitions")
        order, r, deadline, last_s = list(groups), 0, None, 0.0
        while True:
            started = time.monotonic()
            for role in order if r % 2 == 0 else order[::-1]:
                groups[role].proc.send(cmd="steady", reps=cfg.reps, offset=r * cfg.reps)
                for rank, event in enumerate(groups[role].gather("steady", phase=f"steady-state round {r + 1}")):
                    steady[role][rank].append(event["times"])
            r, last_s = r + 1, time.monotonic() - started
            if r < cfg.rounds:
                continue
            unstable = [role for role in order if timing.stability(steady[role][0][-cfg.rounds:])["stable"] is False]
            if not (extend and unstable and cfg.steady_budget > 0):
                break
            if deadline is None:
                deadline = time.monotonic() + cfg.steady_budget
                self.note(f"steady state unstable on {', '.join(unstable)}: adding rounds for up to {cfg.steady_budget:g} s")
            if time.monotonic() + last_s > deadline:
                break
        self.rounds_run = r
        return {role: [rounds[-cfg.rounds:] for rounds in ranks] for role, ranks in steady.items()}

    def trace(self, groups: dict[str, Group], offset: int) -> None:
        """One torch.profiler trace per device over a few steps after the timed ones (--trace), whose batches
        start at ``offset`` (past the steady-state rounds')."""
        for role, group in groups.items():
            device = self.cfg.ref if role == "ref" else self.cfg.target
            path = Path(self.cfg.output) / f"trace-{role}-{device.replace(':', '')}.json"
            group.proc.send(cmd="trace", path=str(path), offset=offset)
            events = group.gather("traced", phase=f"trace ({role})")
            timings = [self.report.timing.ref] if role == "ref" else ([self.report.timing.target] if not self.report.timing.ranks
                                                                      else self.report.timing.ranks)
            for t, event in zip(timings, events):
                t.profile_trace = event["path"]
            self.note(f"trace: {', '.join(e['path'] for e in events)}")

    def check_resume(self, target_tensors: Capture) -> None:
        cfg = self.source
        if cfg.mode != Mode.TRAIN:
            self.report.resume.notes.append(f"resume applies to train; mode is {cfg.mode}")
            return
        if not cfg.resume_step:
            self.report.resume.notes.append(f"resume needs --steps 2 or more (a checkpoint after step k, then the steps "
                                            f"after it); --steps {cfg.steps} leaves no step to resume")
            return
        self.note(f"resume: fresh {self.cfg.target} process from the step-{cfg.resume_step} checkpoint")
        worker = self.spawn("resume", self.cfg.target)
        try:
            resumed = WorkerSummary.from_dict(worker.gather("result", phase="resume")[0]["data"]).resumed
        except (StepTimeoutError, DeviceUnavailableError, DeviceOutOfMemoryError, OutputError):
            raise
        except FerryError as error:
            self.report.resume.status = ResultStatus.FAIL
            self.report.resume.notes.append(str(error))
            return
        finally:
            self.kill_all()  # it has reported (or failed): nothing left to ask of it
        self.report.resume = resume.judge(target_tensors.run.losses, resumed, self.cfg.tolerance.tol)
        self.note(f"resume: {self.report.resume.status}")

    def check_exit(self, formats: exit_mod.SavedFormats, eval_outputs: dict) -> None:
        self.note(f"exit: reloading {len(formats.saved)} formats on {self.cfg.ref} without torchferry")
        try:
            self.report.exit = exit_mod.check(self.workdir, formats, eval_outputs, self.cfg)
        except (RuntimeError, StepTimeoutError) as exc:
            self.report.exit.status = ResultStatus.FAIL
            self.report.exit.notes.append(f"the exit loader failed: {exc}")
        self.note(f"exit: {self.report.exit.status}")

