"""One device's side of `ferry check`, run in its own process: `python -m torchferry.check.worker JOB.json`.

A crash here (segfault, abort, OOM kill) ends this process only; the runner reports it.
It speaks the harness's worker protocol (torchferry.harness.protocol): JSON events on the
original stdout (the user's prints go to stderr, the runner's log), commands as JSON lines on
stdin after the main job. Tensors go, on the CPU, to the path the runner chose (``job["tensors"]``),
holding only tensors and plain containers so that the runner loads them with ``weights_only=True``.
Wall-clock times are relative to ``TORCHFERRY_T0``, the runner's clock just before the spawn.

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
from pathlib import Path
from typing import Any

from torchferry.check import exit as exit_result, parity, rehearsal, resume, timing
from torchferry.check.config import CheckConfig
from torchferry.harness import launch
from torchferry.harness.case import ModelCase
from torchferry.harness.modes import Mode
from torchferry.harness.window import Window
from torchferry.harness.worker import Channel, run_case

T_MAIN = time.time()
ROLE_ENV = "TORCHFERRY_CHECK_ROLE"  # "ref" | "target" | "resume" | "numerics": visible to workloads, for test fixtures
NUMERICS_ENV = "TORCHFERRY_NUMERICS"  # the "numerics" role reruns the target with host numerics


class Session:
    """One role's worker: builds the workload on its device (a harness ModelCase), runs the timed steps, and hands
    each result's capture half what it needs (parity, resume, exit, rehearsal); then serves steady and profile."""

    def __init__(self, job: dict, channel: Channel) -> None:
        self.job, self.cfg, self.channel = job, CheckConfig.from_dict(job["config"]), channel
        self.role, self.outdir = job["role"], Path(job["outdir"])
        self.clock = timing.StepClock(T_MAIN, self.cfg.steps)
        self.timing = self.clock.figures
        self.rank, self.world = channel.rank, channel.world
        self.rehearsal: rehearsal.Recorder | None = None  # on a target that emulates another device (rank 0)

    def setup(self) -> None:
        with self.clock.lap("import_s"):
            import torch

            from torchferry.harness import devices
        self.torch = torch
        self.channel.progress(f"imported torch {torch.__version__} ({self.timing['import_s']:.1f} s)")
        device = devices.resolve(self.job["device"])
        self.timing["emulates"] = devices.emulates(device)
        if self.world > 1:
            device, backend = launch.join_group(device, self.cfg.timeout)
            self.channel.progress(f"rank {self.rank} of {self.world} on {device}, backend {backend!r}")
        with self.clock.lap("load_s"):
            torch.manual_seed(self.cfg.seed)
            self.case = case = ModelCase(self.cfg.load_workload(), device, self.cfg.step_plan(), self.rank, self.world)
            first = case.workload.batch("cpu", self.cfg.seed)
            self.batch_rows = case.rows_of(first)  # the runner checks the split over --nproc before the first step
            self.channel.send("batch", rows=self.batch_rows)
            if self.world > 1:
                case.shard(first)  # an indivisible batch fails here, on every rank
            self.model = case.fresh()
            if self.role == "target" and self.rank == 0:
                self.rehearsal = rehearsal.start(self.outdir, device, self.timing["emulates"])
            devices.synchronize(device)
        self.channel.progress(f"built {self.cfg.workload} on {device} ({self.timing['load_s']:.1f} s)")

    def after_primary_step(self, index: int, seconds: float, model: Any, opt: Any) -> None:
        if (message := self.clock.stepped(index, seconds)) is not None:
            self.channel.progress(message)
        if (self.role == "target" and self.rank == 0 and self.cfg.mode == Mode.TRAIN
                and index + 1 == self.cfg.resume_step):
            with self.clock.excluded():
                resume.save(self.case, self.case.bare(model), opt, index + 1, self.outdir)

    # -- the roles -------------------------------------------------------------------------
    def main_job(self) -> dict:
        """The role's work: ``resume`` and ``numerics`` rerun the target; ``ref`` and ``target`` run the timed steps."""
        if self.role == "resume":
            return {"resume": resume.capture(self.case, self.outdir)}
        if self.role == "numerics":
            return rehearsal.host_numerics_capture(self.case, self.model, self.cfg.compile, self.job["tensors"])
        return self.timed_run()

    def timed_run(self) -> dict:
        """The timed steps, their window and timings; on rank 0 the results' captures."""
        case, cfg = self.case, self.cfg
        compiling = self.role == "target" and bool(cfg.compile)
        window = Window(case.device, cfg.compile if compiling else None)  # the timed run's figures
        model = case.timed(self.model, cfg.compile if compiling else None)
        watch = self.rehearsal.step if self.rehearsal is not None else None
        primary, opt = case.run(model, watch=watch, after_step=self.after_primary_step)
        self.channel.progress(f"{cfg.steps} steps in {self.timing['time_to_n_s']:.1f} s from process start")
        reading = window.read()
        self.timing.update(steps=primary.times, **timing.captured(reading))
        if self.rehearsal is not None:
            self.rehearsal.finish(reading, case.fresh_step)
        self.timing["units_per_step"], self.timing["unit"] = case.units_per_step()
        self.live = (model, opt)
        summary: dict[str, Any] = {"timing": self.timing, "device": str(case.device), "batch_rows": self.batch_rows}
        if self.rank > 0:  # rank 0 speaks for the group; the others only time their share
            return summary
        summary["rng_draws"] = case.rng_draws()
        capture, determinism = parity.capture(case, primary, self.role == "ref", self.channel.progress)
        if self.role == "ref":
            summary["determinism"] = determinism
            summary["timing"]["flops_per_step"] = case.flops_per_step()
        else:
            # the bare module evaluates: a DDP forward may broadcast buffers, a collective rank 0 would wait in alone
            summary["exit"], capture.eval_outputs = exit_result.capture(
                case, self.model, opt, self.model if self.world > 1 else model, self.outdir)
        capture.save(self.job["tensors"])
        return summary

    # -- the runner's commands after the main job ------------------------------------------------
    def steady(self, reps: int, offset: int) -> list[float]:
        """Timed repetitions of one step, for the runner to interleave across devices."""
        model, opt = self.live
        return [self.case.step(model, opt, self.cfg.steps + offset + i)[0] for i in range(reps)]

    def profile(self, path: str, offset: int) -> dict:
        """A few untimed steps under torch.profiler (--profile), after the steady state; one trace per rank."""
        from torchferry.check import profiling

        model, opt = self.live
        return profiling.trace(lambda index: self.case.step(model, opt, index), self.case.device,
                               profiling.rank_path(Path(path), self.rank, self.world), self.cfg.steps + offset)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    channel = Channel(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
    os.environ[ROLE_ENV] = job["role"]
    if job["role"] == "numerics":
        os.environ[NUMERICS_ENV] = "host"  # read when the device starts, in setup
    session = Session(job, channel)

    def serve() -> None:
        session.setup()
        channel.send("result", data=session.main_job())
        for command in channel.commands():
            if command["cmd"] == "steady":
                channel.send("steady", times=session.steady(command["reps"], command["offset"]))
            elif command["cmd"] == "profile":
                channel.send("profiled", **session.profile(command["path"], command["offset"]))
        if session.world > 1:
            launch.leave_group()

    outcome = run_case(serve)
    if not outcome.ok:  # report the failure to the runner, then exit non-zero
        outcome.log_traceback()
        event = outcome.failure_event(session.outdir, f"{job['role']} worker")
        if session.rehearsal is not None:
            event["message"] = session.rehearsal.failed(outcome.exception, event["message"])
        channel.send("error", **event, timing=session.timing)
        if channel.world > 1:
            time.sleep(launch.FAILED_RANK_WAIT_S)  # the runner gathers the other ranks' states, then stops the launcher
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
