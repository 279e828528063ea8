"""Runs each device in its own subprocess and assembles the one result model.

Order: reference worker (timed run, second run for determinism, fp64 golden run), target
worker (timed run, mid-run resume checkpoint, exit checkpoints), steady-state repetitions
interleaved across the two live workers, a fresh target process that resumes, then the
torchferry-free exit loader. Results are kept as they arrive, so whatever was measured
before a failure is still in the report.
"""

from __future__ import annotations

import json
import os
import queue
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

ERRORS: dict[str, type[FerryError]] = {
    "device": DeviceUnavailableError,
    "dependency": MissingDependencyError,
    "usage": UsageError,
    "oom": DeviceOutOfMemoryError,
    "nonfinite": NonFiniteError,
    "workload": WorkloadError,
}


class Worker:
    """One device's subprocess, spoken to in JSON lines; its stderr goes to ``<outdir>/<role>.log``."""

    def __init__(self, role: str, device: str, cfg: dict, outdir: Path, timeout: float, progress: Callable[[str], None]):
        self.role, self.device, self.timeout, self.progress = role, device, timeout, progress
        job = outdir / f"job-{role}.json"
        job.write_text(json.dumps({"role": role, "device": device, "config": cfg, "outdir": str(outdir)}))
        self.log = outdir / f"{role}.log"
        env = dict(os.environ)
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

    def wait(self, *wanted: str) -> dict:
        """The next event among ``wanted``, an ``error``, or a ``crash`` if the process died."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise StepTimeoutError(
                    f"the {self.role} worker on {self.device!r} gave no result within {self.timeout:g} s. Raise --timeout, "
                    f"or use a smaller --size/--steps; its log is {self.log}."
                ) from None
            if event is None:
                code = self.proc.wait()
                tail = self.log.read_text().strip().splitlines()[-3:]
                signal = f" (signal {-code})" if code < 0 else ""
                return {"event": "crash", "returncode": code,
                        "message": f"{' | '.join(tail) or 'no output'}{signal}; full log: {self.log}"}
            if event["event"] == "progress":
                self.progress(f"[{self.role} {self.device}] {event['msg']}")
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

    def run(self) -> None:
        import torch

        ref_dev, target_dev = self.cfg["ref"], self.cfg["target"]
        self.note(f"reference {ref_dev}: starting")
        ref, ref_event = self.start("ref", ref_dev)
        workers = [ref]
        try:
            if ref_event["event"] != "result":
                raise to_error("reference", ref_dev, ref_event)
            ref_summary = ref_event["data"]
            self.note(f"target {target_dev}: starting")
            target, target_event = self.start("target", target_dev)
            workers.append(target)
            if target_event["event"] != "result":
                self.target_failed(target_event, ref_summary)
                return
            target_summary = target_event["data"]
            steady = self.interleave(ref, target)
        finally:
            for w in workers:
                w.close()
        self.report.timing = timing.summarise(
            timing.device_timing(ref_dev, ref_summary["timing"], steady["ref"]),
            timing.device_timing(target_dev, {**target_summary["timing"], "flops_per_step": ref_summary["timing"].get("flops_per_step")},
                                 steady["target"]),
        )
        ref_tensors = torch.load(ref_summary["tensors"], weights_only=False)
        target_tensors = torch.load(target_summary["tensors"], weights_only=False)
        self.report.parity = parity.judge(self.cfg, ref_tensors, target_tensors, ref_summary.get("determinism"))
        self.note(f"parity: {self.report.parity.status}")
        self.report.cost = cost.estimate(self.report.timing, self.cfg, cost.load_prices(self.cfg.get("prices")))
        self.check_resume(target_tensors)
        self.check_exit(target_summary["exit"], target_tensors["eval_outputs"])

    def target_failed(self, event: dict, ref_summary: dict) -> None:
        """A target that fails where the reference ran is a finding (no-go), except OOM and a missing device."""
        error = to_error("target", self.cfg["target"], event)
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

    def interleave(self, ref: Worker, target: Worker) -> dict:
        """Steady-state repetitions, alternating devices each round (ABBA) to share drift and load."""
        steady: dict[str, list] = {"ref": [], "target": []}
        rounds, reps = self.cfg["rounds"], self.cfg["reps"]
        self.note(f"steady state: {rounds} interleaved rounds x {reps} repetitions")
        for r in range(rounds):
            for worker in ((ref, target) if r % 2 == 0 else (target, ref)):
                worker.send(cmd="steady", reps=reps, offset=r * reps)
                event = worker.wait("steady")
                if event["event"] != "steady":
                    raise to_error(worker.role, worker.device, event)
                steady[worker.role].append(event["times"])
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

