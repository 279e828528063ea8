"""Runs each device in its own subprocess and assembles the one result model.

Order: reference worker (timed run, second run for determinism, fp64 golden run), target
worker (timed run, mid-run resume checkpoint, exit checkpoints), steady-state repetitions
interleaved across the two live workers, a fresh target process that resumes, then the
torchferry-free exit loader. Results are kept as they arrive, so whatever was measured
before a failure is still in the report.

Under ``--nproc N`` the target is N worker processes, one DDP rank each, spoken to as a
group: every command goes to all ranks, and a rank that fails or stops answering fails the
group within a grace period instead of leaving the others waiting.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchferry.check import cost, exit as exit_mod, parity, resume, timing
from torchferry.check.results import CheckReport
from torchferry.errors import (
    DeviceOutOfMemoryError,
    DeviceUnavailableError,
    FerryError,
    MissingDependencyError,
    NonFiniteError,
    StepTimeoutError,
    UsageError,
    WorkloadError,
)

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 10.0  # after one rank fails, how long the others get to report (a dead peer breaks their collectives)

ERRORS: dict[str, type[FerryError]] = {
    "device": DeviceUnavailableError,
    "dependency": MissingDependencyError,
    "usage": UsageError,
    "oom": DeviceOutOfMemoryError,
    "nonfinite": NonFiniteError,
    "workload": WorkloadError,
}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a process group's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Worker:
    """One device's subprocess, spoken to in JSON lines; its stderr goes to ``<outdir>/<name>.log``.

    With ``world`` > 1 it is rank ``rank`` of a process group that rendezvous at 127.0.0.1:``port``,
    with torchrun's environment variables set.
    """

    def __init__(self, role: str, device: str, cfg: dict, outdir: Path, timeout: float, progress: Callable[[str], None],
                 rank: int = 0, world: int = 1, port: int = 0):
        self.role, self.device, self.timeout, self.progress = role, device, timeout, progress
        self.rank, self.label = rank, role if world == 1 else f"{role} rank {rank}"
        name = role if world == 1 else f"{role}.rank{rank}"
        job = outdir / f"job-{name}.json"
        job.write_text(json.dumps({"role": role, "device": device, "config": cfg, "outdir": str(outdir),
                                   "rank": rank, "world": world}))
        self.log = outdir / f"{name}.log"
        env = dict(os.environ)
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["TORCHFERRY_T0"] = repr(time.time())
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "torchferry.check.worker", str(job)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=outdir)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.events.put(None)

    def wait(self, *wanted: str, within: float | None = None) -> dict | None:
        """The next event among ``wanted``, an ``error``, or a ``crash`` if the process died.

        With ``within``, None when nothing came in that many seconds; without, the worker's
        timeout applies and expiring it kills the worker.
        """
        deadline = time.monotonic() + (self.timeout if within is None else within)
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if within is not None:
                    return None
                self.kill()
                raise StepTimeoutError(
                    f"the {self.label} worker on {self.device!r} gave no result within {self.timeout:g} s. Raise --timeout, "
                    f"or use a smaller --size/--steps; its log is {self.log}."
                ) from None
            if event is None:
                code = self.proc.wait()
                tail = self.log.read_text().strip().splitlines()[-3:]
                signal = f" (signal {-code})" if code < 0 else ""
                return {"event": "crash", "returncode": code,
                        "message": f"{' | '.join(tail) or 'no output'}{signal}; full log: {self.log}"}
            if event["event"] == "progress":
                self.progress(f"[{self.label} {self.device}] {event['msg']}")
            elif event["event"] in wanted or event["event"] == "error":
                return event

    def send(self, **command: Any) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(cmd="quit")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def gather(workers: list[Worker], *wanted: str) -> tuple[list[dict], tuple[Worker, dict] | None]:
    """Each worker's next event among ``wanted``, and the group's failure if any: (worker, event).

    The failure is a rank that died, else the first to fail, its message followed by every other rank's state;
    ranks still silent ``GRACE_S`` after it (hung, not dead) are killed and said so. With one
    worker this is ``Worker.wait``.
    """
    if len(workers) == 1:
        event = workers[0].wait(*wanted)
        return [event], None if event["event"] in wanted else (workers[0], event)
    events: dict[int, dict] = {}
    first: Worker | None = None
    deadline = time.monotonic() + workers[0].timeout
    while len(events) < len(workers):
        for w in workers:
            if w.rank not in events and (event := w.wait(*wanted, within=0.05)) is not None:
                events[w.rank] = event
                if first is None and event["event"] not in wanted:
                    first, deadline = w, min(deadline, time.monotonic() + GRACE_S)
        if time.monotonic() > deadline:
            silent = [w for w in workers if w.rank not in events]
            for w in silent:
                w.kill()
            if first is None:
                raise StepTimeoutError(
                    f"{', '.join(w.label for w in silent)} on {workers[0].device!r} gave no result within "
                    f"{workers[0].timeout:g} s. Raise --timeout, or use a smaller --size/--steps; logs: "
                    f"{', '.join(str(w.log) for w in silent)}.")
            for w in silent:
                events[w.rank] = {"event": "hang", "message": f"no answer {GRACE_S:g} s after {first.label} failed; killed"}
    ordered = [events[w.rank] for w in workers]
    if first is None:
        return ordered, None
    cause = next((w for w in workers if events[w.rank]["event"] == "crash"), first)  # a dead rank fails its peers
    others = "; ".join(f"{w.label}: {state(events[w.rank])}" for w in workers if w is not cause)
    return ordered, (cause, {**events[cause.rank], "message": f"{events[cause.rank]['message']} [other ranks: {others}]"})


def state(event: dict) -> str:
    """One rank's outcome in a few words, for a group failure's message."""
    if event["event"] in ("crash", "hang"):
        return f"died (exit status {event['returncode']})" if event["event"] == "crash" else event["message"]
    if event["event"] == "error":
        return f"{event['type']}: {event['message'].splitlines()[0] if event['message'] else ''}"
    return "finished"


def to_error(role: str, device: str, event: dict) -> FerryError:
    """The typed error for a worker's failure event."""
    if event["event"] == "crash":
        return WorkloadError(f"the {role} process on {device!r} died (exit status {event['returncode']}) before "
                             f"reporting: {event['message']}")
    cls = ERRORS.get(event["kind"], WorkloadError)
    message = f"on the {role} device {device!r}: {event['message']}"
    if event["kind"] == "oom":
        message += ". Use a smaller --size or --batch-size."
    if issubclass(cls, WorkloadError):
        return cls(message, event.get("traceback"))
    return cls(message)


class Runner:
    """Fills ``report`` step by step; raises a FerryError (report kept) when a step cannot go on."""

    def __init__(self, report: CheckReport, outdir: Path, progress: Callable[[str], None]):
        self.report, self.outdir, self.progress = report, outdir.resolve(), progress
        self.outdir.mkdir(parents=True, exist_ok=True)  # job files, worker logs, tensors and checkpoints
        self.cfg = report.config
        self.timeout = float(self.cfg["timeout"])

    def note(self, message: str) -> None:
        self.report.progress.append(message)
        self.progress(message)

    def start(self, role: str, device: str) -> tuple[Worker, dict]:
        worker = Worker(role, device, self.cfg, self.outdir, self.timeout, self.note)
        return worker, worker.wait("result")

    def start_target(self) -> tuple[list[Worker], list[dict], tuple[Worker, dict] | None]:
        """The target's ``--nproc`` ranks (one plain worker when 1): workers, result events, failure."""
        nproc, port = self.cfg["nproc"], free_port() if self.cfg["nproc"] > 1 else 0
        ranks = [Worker("target", self.cfg["target"], self.cfg, self.outdir, self.timeout, self.note, rank, nproc, port)
                 for rank in range(nproc)]
        return ranks, *gather(ranks, "result")

    def run(self) -> None:
        import torch

        ref_dev, target_dev, nproc = self.cfg["ref"], self.cfg["target"], self.cfg["nproc"]
        self.note(f"reference {ref_dev}: starting")
        ref, ref_event = self.start("ref", ref_dev)
        workers = [ref]
        try:
            if ref_event["event"] != "result":
                raise to_error("reference", ref_dev, ref_event)
            ref_summary = ref_event["data"]
            self.note(f"target {target_dev}: starting" + (f" {nproc} DDP ranks" if nproc > 1 else ""))
            ranks, target_events, failure = self.start_target()
            workers += ranks
            if failure is not None:
                self.target_failed(*failure, ref_summary)
                return
            target_summary = target_events[0]["data"]
            steady = self.interleave({"ref": [ref], "target": ranks})
        finally:
            for w in workers:
                w.close()
        flops = {"flops_per_step": ref_summary["timing"].get("flops_per_step")}
        self.report.timing = timing.summarise(
            timing.device_timing(ref_dev, ref_summary["timing"], steady["ref"][0]),
            timing.device_timing(target_dev, {**target_summary["timing"], **flops}, steady["target"][0],
                                 rank=0 if nproc > 1 else None),
        )
        if nproc > 1:
            self.report.timing.ranks = [
                timing.device_timing(event["data"]["device"], {**event["data"]["timing"], **flops}, times, rank=rank)
                for rank, (event, times) in enumerate(zip(target_events, steady["target"]))]
            self.report.timing.notes.append(
                f"target: DDP over {nproc} processes, each on 1/{nproc} of every batch; its figures are rank 0's "
                "(ranks meet at every step's gradient all-reduce), each rank's are listed per rank")
        ref_tensors = torch.load(ref_summary["tensors"], weights_only=False)
        target_tensors = torch.load(target_summary["tensors"], weights_only=False)
        self.report.parity = parity.judge(self.cfg, ref_tensors, target_tensors, ref_summary.get("determinism"))
        self.note(f"parity: {self.report.parity.status}")
        self.report.cost = cost.estimate(self.report.timing, self.cfg, cost.load_prices(self.cfg.get("prices")))
        self.check_resume(target_tensors)
        self.check_exit(target_summary["exit"], target_tensors["eval_outputs"])

    def target_failed(self, worker: Worker, event: dict, ref_summary: dict) -> None:
        """A target that fails where the reference ran is a finding (no-go), except OOM and a missing device."""
        error = to_error(worker.label, worker.device, event)
        if isinstance(error, (DeviceUnavailableError, DeviceOutOfMemoryError, UsageError)):
            raise error
        kind = "non_finite" if event.get("kind") == "nonfinite" else "fail_to_run"
        self.report.parity.status = kind
        self.report.parity.notes.append(str(error))
        partial = timing.device_timing(self.cfg["target"], event.get("timing") or {}, [])
        self.report.timing = timing.summarise(timing.device_timing(self.cfg["ref"], ref_summary["timing"], []), partial)
        self.report.timing.status = "partial"
        self.report.failure = {"kind": kind, "message": str(error), "traceback": event.get("traceback")}
        self.note(f"target failed: {error}")

    def interleave(self, groups: dict[str, list[Worker]]) -> dict[str, list[list[list[float]]]]:
        """Steady-state repetitions, alternating devices each round (ABBA) to share drift and load.

        Returns role -> rank -> rounds of times; all ranks of a role step together.
        """
        steady = {role: [[] for _ in ranks] for role, ranks in groups.items()}
        rounds, reps = self.cfg["rounds"], self.cfg["reps"]
        self.note(f"steady state: {rounds} interleaved rounds x {reps} repetitions")
        order = list(groups)
        for r in range(rounds):
            for role in order if r % 2 == 0 else order[::-1]:
                for worker in groups[role]:
                    worker.send(cmd="steady", reps=reps, offset=r * reps)
                events, failure = gather(groups[role], "steady")
                if failure is not None:
                    raise to_error(failure[0].label, failure[0].device, failure[1])
                for rank, event in enumerate(events):
                    steady[role][rank].append(event["times"])
        return steady

    def check_resume(self, target_tensors: dict) -> None:
        if self.cfg["mode"] != "training":
            self.report.resume.notes.append(f"resume applies to training; mode is {self.cfg['mode']}")
            return
        self.note(f"resume: fresh {self.cfg['target']} process from the step-{self.cfg['resume_step']} checkpoint")
        worker, event = self.start("resume", self.cfg["target"])
        worker.close()
        if event["event"] != "result":
            self.report.resume.status = "fail"
            self.report.resume.notes.append(str(to_error("resume", self.cfg["target"], event)))
            return
        tol = parity.tolerance(self.cfg["mode"], self.cfg["dtype"], self.cfg.get("tol"))
        self.report.resume = resume.judge(target_tensors["run"]["losses"], event["data"]["resume"], tol)
        self.note(f"resume: {self.report.resume.status}")

    def check_exit(self, target_exit: dict, eval_outputs: dict) -> None:
        self.note(f"exit: reloading {len(target_exit['saved'])} formats on {self.cfg['ref']} without torchferry")
        try:
            self.report.exit = exit_mod.check(self.outdir, target_exit["saved"], target_exit["architecture"], eval_outputs,
                                              self.cfg, self.cfg["ref"], self.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            self.report.exit.status = "fail"
            self.report.exit.notes.append(f"the exit loader failed: {exc}")
        self.note(f"exit: {self.report.exit.status}")

