"""One device's side of `ferry check` for a built workload, in its own process: `python -m torchferry.check.worker JOB.json`.

A crash here (segfault, abort, OOM kill) ends this process only; the runner reports it.
It speaks the harness's worker protocol (torchferry.harness.protocol): JSON events on the
original stdout (the user's prints go to stderr, the runner's log), commands as JSON lines on
stdin after the main job. The job (``WorkerJob``) and the result (``WorkerSummary``) cross the
process boundary as typed records (torchferry.records). Tensors go, on the CPU, to the path the
runner chose (``WorkerJob.tensors``), holding only tensors and plain containers so that the
runner loads them with ``weights_only=True``. Wall-clock times are relative to ``TORCHFERRY_T0``,
the runner's clock just before the spawn.

Under ``--nproc N`` the runner starts the target with ``torch.distributed.run``, which sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and the rendezvous. Ranks join the device's default
process-group backend, train one DistributedDataParallel model, each on its 1/N shard of
every batch, and average the loss over ranks, so the run equals one process on the global
batch. Rank 0 speaks for the group (tensors, checkpoints, exit formats) and reads the
runner's commands; every rank reports its own timings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.check import exit as exit_result, parity, rehearsal, resume, timing
from torchferry.check.config import CheckConfig
from torchferry.check.exit import SavedFormats
from torchferry.check.parity import Determinism
from torchferry.check.resume import Resumed
from torchferry.check.timing import StepFigures
from torchferry.harness import launch
from torchferry.harness.case import ModelCase
from torchferry.harness.modes import Mode
from torchferry.harness.window import Window
from torchferry.harness.worker import Channel, run_case
from torchferry.records import Record

T_MAIN = time.time()
ROLE_ENV = "TORCHFERRY_CHECK_ROLE"  # "ref" | "target" | "resume" | "numerics": visible to workloads, for test fixtures
NUMERICS_ENV = "TORCHFERRY_NUMERICS"  # the "numerics" role reruns the target with host numerics
ROLES = ("ref", "target", "resume", "numerics")


@dataclass(frozen=True, kw_only=True)
class WorkerJob(Record):
    """What the runner hands one worker: its role and device, the run's config, and where its files go."""

    role: str  # one of ROLES
    device: str
    config: CheckConfig
    outdir: str  # the run's work folder
    tensors: str  # where this worker saves its capture

    @property
    def rehearsal_record(self) -> Path:
        return Path(self.outdir) / rehearsal.RECORD


@dataclass(kw_only=True)
class WorkerSummary(Record):
    """What one worker (one rank) reports when its main job is done: its figures, and each result's capture half."""

    device: str
    timing: StepFigures
    batch_rows: int | None = None
    rng_draws: list[float] | None = None  # four uniform draws right after seeding (parity's random-stream note)
    determinism: Determinism | None = None  # the reference's two runs compared (ref only)
    exit: SavedFormats | None = None  # the formats the target saved (target rank 0 only)
    resumed: Resumed | None = None  # the resume role's losses
    numerics: str | None = None  # the numerics role's device numerics


class Session:
    """One role's worker: builds the workload on its device (a harness ModelCase), runs the timed steps, and hands
    each result's capture half what it needs (parity, resume, exit, rehearsal); then serves steady and trace."""

    def __init__(self, job: WorkerJob, channel: Channel) -> None:
        self.job, self.cfg, self.channel = job, job.config, channel
        self.source = job.config.workload
        self.role, self.outdir = job.role, Path(job.outdir)
        self.clock = timing.StepClock(T_MAIN, self.source.steps)
        self.figures = self.clock.figures
        self.rank, self.world = channel.rank, channel.world
        self.rehearsal: rehearsal.Recorder | None = None  # on a target that emulates another device (rank 0)

    def setup(self) -> None:
        with self.clock.lap("import_s"):
            import torch

            from torchferry.harness import devices
        self.torch = torch
        self.channel.progress(f"imported torch {torch.__version__} ({self.figures.import_s:.1f} s)")
        device = devices.resolve(self.job.device)
        self.figures.emulates = devices.emulates(device)
        if device.type != "cpu" and not self.figures.emulates and not self.cfg.device_rng:
            from torchferry.check.streams import draw_on_host

            draw_on_host()  # a real accelerator: its random draws come from the host's stream, as the reference's
        if self.world > 1:
            device, backend = launch.join_group(device, self.cfg.timeout)
            self.channel.progress(f"rank {self.rank} of {self.world} on {device}, backend {backend!r}")
        with self.clock.lap("load_s"):
            torch.manual_seed(self.cfg.seed)
            self.case = case = ModelCase(self.source.load(), device, self.source.step_plan(self.cfg.seed), self.rank,
                                         self.world)
            first = case.workload.batch("cpu", self.cfg.seed)
            self.batch_rows = case.rows_of(first)  # the runner checks the split over --nproc before the first step
            self.channel.send("batch", rows=self.batch_rows)
            if self.world > 1:
                case.shard(first)  # an indivisible batch fails here, on every rank
            self.model = case.fresh()
            devices.synchronize(device)
        self.channel.progress(f"built {self.source.spec} on {device} ({self.figures.load_s:.1f} s)")

    def after_primary_step(self, index: int, seconds: float, model: Any, opt: Any) -> None:
        if (message := self.clock.stepped(index, seconds)) is not None:
            self.channel.progress(message)
        if (self.role == "target" and self.rank == 0 and self.source.mode == Mode.TRAIN
                and index + 1 == self.source.resume_step):
            with self.clock.excluded():
                resume.save(self.case, self.case.bare(model), opt, index + 1, self.outdir)

    # -- the roles -------------------------------------------------------------------------
    def main_job(self) -> WorkerSummary:
        """The role's work: ``resume`` and ``numerics`` rerun the target; ``ref`` and ``target`` run the timed steps."""
        summary = WorkerSummary(device=str(self.case.device), timing=self.figures, batch_rows=self.batch_rows)
        if self.role == "resume":
            summary.resumed = resume.capture(self.case, self.outdir)
        elif self.role == "numerics":
            summary.numerics = rehearsal.host_numerics_capture(self.case, self.model, self.source.compile,
                                                               self.job.tensors)
        else:
            self.timed_run(summary)
        return summary

    def timed_run(self, summary: WorkerSummary) -> None:
        """The timed steps, their window and timings; on rank 0 the results' captures."""
        case, source = self.case, self.source
        compiling = self.role == "target" and bool(source.compile)
        window = Window(case.device, source.compile if compiling else None)  # the timed run's figures
        if self.role == "target" and self.rank == 0:  # after the window cleared the counters it starts from
            self.rehearsal = rehearsal.Recorder.start(self.job.rehearsal_record, case.device)
        model = case.timed(self.model, source.compile if compiling else None)
        watch = self.rehearsal.watch if self.rehearsal is not None else None
        primary, opt = case.run(model, watch=watch, after_step=self.after_primary_step)
        self.channel.progress(f"{source.steps} steps in {self.figures.time_to_n_s:.1f} s from process start")
        reading = window.read()
        self.figures.steps, self.figures.reading = primary.times, reading
        if self.rehearsal is not None:
            self.rehearsal.finish(case.fresh_step, reading)
        self.figures.units_per_step, self.figures.unit = case.units_per_step()
        self.live = (model, opt)
        if self.rank > 0:  # rank 0 speaks for the group; the others only time their share
            return
        summary.rng_draws = case.rng_draws()
        capture, summary.determinism = parity.capture(case, primary, self.role == "ref", self.channel.progress)
        if self.role == "ref":
            self.figures.flops_per_step = case.flops_per_step()
        else:
            # the bare module evaluates: a DDP forward may broadcast buffers, a collective rank 0 would wait in alone
            summary.exit, capture.eval_outputs = exit_result.capture(
                case, self.model, opt, self.model if self.world > 1 else model, self.outdir)
        capture.save(self.job.tensors)

    # -- the runner's commands after the main job ------------------------------------------------
    def steady(self, reps: int, offset: int) -> list[float]:
        """Timed repetitions of one step, for the runner to interleave across devices."""
        model, opt = self.live
        return [self.case.step(model, opt, self.source.steps + offset + i)[0] for i in range(reps)]

    def trace(self, path: str, offset: int) -> dict:
        """A few untimed steps under torch.profiler (--trace), after the steady state; one trace per rank."""
        from torchferry.check import profiling

        model, opt = self.live
        return profiling.trace(lambda index: self.case.step(model, opt, index), self.case.device,
                               profiling.rank_path(Path(path), self.rank, self.world), self.source.steps + offset)


def main(argv: list[str]) -> int:
    job = WorkerJob.from_dict(json.loads(Path(argv[0]).read_text()))
    channel = Channel(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
    os.environ[ROLE_ENV] = job.role
    if job.role == "numerics":
        os.environ[NUMERICS_ENV] = "host"  # read when the device starts, in setup
    session = Session(job, channel)

    def serve() -> None:
        session.setup()
        channel.send("result", data=session.main_job().to_dict())
        for command in channel.commands():
            if command["cmd"] == "steady":
                channel.send("steady", times=session.steady(command["reps"], command["offset"]))
            elif command["cmd"] == "trace":
                channel.send("traced", **session.trace(command["path"], command["offset"]))
        if session.world > 1:
            launch.leave_group()

    outcome = run_case(serve)
    if not outcome.ok:  # report the failure to the runner, then exit non-zero
        outcome.log_traceback()
        event = outcome.failure_event(session.outdir, f"{job.role} worker")
        placement = session.rehearsal.failed(outcome.exception) if session.rehearsal is not None else None
        if placement is not None:
            event["message"] = rehearsal.portability_failure(placement, event["message"])
        channel.send("error", **event)
        if channel.world > 1:
            time.sleep(launch.FAILED_RANK_WAIT_S)  # the runner gathers the other ranks' states, then stops the launcher
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
