"""Runs `ferry check -- COMMAND`: validation, the hard-coded-device stop, the children, the report.

Order: the command is validated (usage errors before anything starts); a script that names CUDA
while the target is not CUDA stops here with `ferry scan`'s findings and their fix; the reference
runs (twice when the target is real hardware); then the target. Each run's records go into the
report as they arrive, so a timeout, Ctrl-C or a failure keeps what was measured. A failure on the
reference is the user's error (their traceback); a failure on the target where the reference ran is
a finding (no-go) at the user's file and line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from torchferry.check import script_judge as judge
from torchferry.check.script import DEFAULT_SEED, HARD_CODED, ChildRun, ScriptCommand, parse_command, run_child, timeout_error
from torchferry.env import Environment
from torchferry.errors import (
    DeviceOutOfMemoryError,
    InterruptedRun,
    NonFiniteError,
    UsageError,
    WorkloadError,
)
from torchferry.harness import devices, script_env
from torchferry.harness.modes import Mode
from torchferry.harness.parity import Tolerance
from torchferry.harness.script_recorder import SEED_ENV, SEED_OFFSET_ENV, STEPS_ENV
from torchferry.report.check import CheckReport, CostResult, ParityStatus, TimingStatus
from torchferry.report.meta import Failure
from torchferry.status import ExitStatus


class ScriptCheck:
    """One `ferry check -- COMMAND` run: its configuration, its children and the report they fill."""

    def __init__(self, args: argparse.Namespace, env: Environment, command: ScriptCommand, report: CheckReport,
                 cwd: Path) -> None:
        self.args, self.env, self.command, self.report, self.cwd = args, env, command, report, cwd
        self.cfg = report.config
        self.workdir = Path(self.cfg["output"]) / "work"
        self.phase = "setup"
        self.runs: dict[str, ChildRun] = {}

    def note(self, message: str) -> None:
        self.report.progress.append(message)
        with open(self.workdir / "ferry.log", "a") as f:
            f.write(message + "\n")
        if not self.args.quiet:
            self.env.err(f"ferry check: {message}")

    def child_env(self, device: str) -> dict[str, str]:
        builtin = device.split(":")[0] == self.cfg["target"].split(":")[0] and self.cfg["target_emulates"] is not None
        env = script_env.script_environment(device, os.environ, builtin)
        env[SEED_ENV] = str(self.cfg["seed"])
        env[SEED_OFFSET_ENV] = "1" if self.phase == "ref-repeat" else "0"
        if self.cfg["steps_limit"]:
            env[STEPS_ENV] = str(self.cfg["steps_limit"])
        return env

    def run_one(self, role: str, device: str) -> ChildRun:
        self.phase = role
        self.note(f"{role} {device}: {' '.join(self.command.given)}")
        run = ChildRun(role=role, device=device, folder=self.workdir / role, log=self.workdir / f"{role}.log")
        self.runs[role] = run
        run_child(run, self.command, self.child_env(device), self.cwd, self.cfg["timeout"], self.note)
        record = run.main_record() or {}
        self.note(f"{role} {device}: exit status {run.returncode} after {run.wall_s:.1f} s; "
                  f"{record.get('steps', 0)} optimizer steps, {len(record.get('losses') or [])} losses recorded")
        return run

    def run(self) -> None:
        cfg = self.cfg
        ref = self.run_one("ref", cfg["ref"])
        self.record_timing()
        if ref.timed_out:
            raise timeout_error(ref, cfg["timeout"])
        ref_record = self.reference_ok(ref)
        self.workload_notes(ref_record)
        again = None if cfg["exact"] else self.run_again()
        target = self.run_one("target", cfg["target"])
        self.record_timing()
        self.phase = "rehearsal"
        self.report.rehearsal = judge.rehearsal(target.main_record())
        if target.timed_out:
            raise timeout_error(target, cfg["timeout"])
        target_record = target.main_record()
        if self.target_failed(target, target_record, ref_record):
            return
        self.phase = "exit"  # now, while the target's checkpoints are on disk (a later reference run writes its own)
        self.report.exit = judge.exit_result(target, cfg["ref"], script_env.script_environment(cfg["ref"], {}, False),
                                             self.workdir, cfg["timeout"])
        self.note(f"exit: {self.report.exit.status}")
        random_ops = ((target_record or {}).get("rehearsal") or {}).get("random_ops") or []
        other_shapes = judge.shape_difference(ref_record, target_record or {})
        why_not_exact = (f"the target drew random numbers on the device ({', '.join(random_ops[:3])}): its random "
                         "stream is not the CPU's" if random_ops else
                         f"the script computed on other shapes on the target ({other_shapes}): a library chose them "
                         "for the target's device, so the same kernels sum in another order" if other_shapes else None)
        switched = bool(cfg["exact"] and why_not_exact)  # a real target is judged by the band from the start
        if switched:
            self.note(f"{why_not_exact}; parity is judged as convergence within the reference's seed-to-seed spread")
            cfg["exact"] = False
            again = self.run_again()
        self.phase = "parity"
        tolerance = Tolerance.resolve(Mode.TRAIN, "float32", self.args.tol)
        self.report.parity = judge.parity(ref_record, again.main_record() if again else None, target_record,
                                          cfg["exact"], tolerance, ref_record.get("_tensors"), target_record.get("_tensors"))
        if switched:
            self.report.parity.notes.append(f"not the exact rule: {why_not_exact}")
        if not cfg["script_seeded"]:
            self.report.parity.notes.append(f"the script does not seed its RNGs: torchferry seeded them at start "
                                            f"(seed {cfg['seed']}, Python, NumPy and torch)")
        self.note(f"parity: {self.report.parity.status}")
        if self.report.parity.status == ParityStatus.NON_FINITE:
            self.report.failure = Failure(kind=NonFiniteError.slug, message=self.report.parity.notes[0],
                                          exit_status=int(ExitStatus.NEGATIVE_RESULT), phase="parity", finding=True)
        self.phase = "cost"
        self.report.cost = self.cost()
        self.report.resume.notes.append("not run for an unchanged script: its own resume code is not called; the "
                                        "exit result reloads the checkpoints it wrote")
        self.phase = "done"

    def cost(self) -> CostResult:
        """Cost per 1k optimizer steps from the steady step (a script's units per step are unknown to torchferry)."""
        from torchferry.check import cost
        from torchferry.check.config import CostInputs
        from torchferry.harness.prices import load_prices

        inputs = CostInputs(**self.cfg["cost"])
        result = cost.estimate(self.report.timing, inputs, load_prices(inputs.prices))
        result.assumptions.append("unit: the script's optimizer step (torchferry does not know its tokens or samples "
                                  "per step); --volume counts steps per month")
        return result

    def run_again(self) -> ChildRun:
        """The reference's second run, every torch seed offset by one: the spread of the band."""
        again = self.run_one("ref-repeat", self.cfg["ref"])
        if again.timed_out:
            raise timeout_error(again, self.cfg["timeout"])
        self.reference_ok(again)
        return again

    def record_timing(self) -> None:
        """The timing result from the runs so far (called after each, so a stop keeps what ran)."""
        from torchferry.check import timing

        ref, target = self.runs.get("ref"), self.runs.get("target")
        ref_t = judge.device_timing(ref, ref.main_record(), None) if ref else None
        emulates = ((target.main_record() or {}).get("rehearsal") or {}).get("emulates") if target else None
        target_t = judge.device_timing(target, target.main_record(), emulates or self.cfg["target_emulates"]) \
            if target else None
        self.report.timing = timing.summarise(ref_t, target_t, warmed=False)
        if target_t is None or target_t.time_to_n_s is None:
            self.report.timing.status = TimingStatus.PARTIAL

    def reference_ok(self, run: ChildRun) -> dict:
        """The reference's main record; a failing reference is the user's error, with their traceback."""
        record = run.main_record()
        stopped_by_steps = record is not None and (record.get("stopped") or "").startswith("--steps")
        if run.returncode != 0 and not stopped_by_steps:
            error = (record or {}).get("error") or {}
            where = f" at {error['file']}:{error['line']}" if error.get("file") else ""
            trace = error.get("traceback") or _tail(run.log)
            if error.get("kind") == DeviceOutOfMemoryError.slug:
                raise DeviceOutOfMemoryError(f"the script ran out of memory on the reference {run.device!r}{where}: "
                                             f"{error.get('message')}")
            raise WorkloadError(f"the script failed on the reference {run.device!r}{where} (exit status "
                                f"{run.returncode}): this is the script's own error, not the target's. Its output: "
                                f"{run.log}", trace)
        if record is None or not record.get("losses"):
            raise UsageError(f"the script does no training: no backward() on a scalar loss was recorded on the reference "
                             f"{run.device!r} ({' '.join(self.command.given)}). For inference, check a model with "
                             "`ferry check --mode forward -w path/to/file.py:build` (the build() protocol).")
        if not all(math.isfinite(v) for v in record["losses"]):
            raise NonFiniteError(f"the script's loss is not finite on the reference {run.device!r}: the script itself "
                                 "is numerically broken")
        used = (record.get("device") or "cpu").split(":")[0]
        if used != run.device.split(":")[0]:
            raise UsageError(f"the reference run trained on {used!r}, not on the reference {run.device!r}: the script "
                             "chooses its device in a way torchferry cannot steer. Let it pick the device with "
                             "torch.accelerator.current_accelerator() (ferry scan shows where it names one).")
        return record

    def workload_notes(self, record: dict) -> None:
        self.cfg["script_seeded"] = bool(record.get("script_seeded"))
        self.report.workload.update(seeded="by the script" if record.get("script_seeded") else
                                    f"by torchferry (seed {self.cfg['seed']}): the script does not seed",
                                    steps_recorded=record.get("steps"), stopped=record.get("stopped"))
        self.cfg["steps"] = record.get("steps") or len(record.get("losses") or [])
        if not record.get("steps"):
            self.note("the script made no optimizer step: parity is judged on the losses it recorded")

    def target_failed(self, run: ChildRun, record: dict | None, ref_record: dict) -> bool:
        """A target that fails where the reference ran is a finding: the user's file and line, the reference's figures."""
        stopped_by_steps = record is not None and (record.get("stopped") or "").startswith("--steps")
        if run.returncode == 0 or stopped_by_steps:
            used = ((record or {}).get("device") or "cpu").split(":")[0]
            if record and used != run.device.split(":")[0]:
                self.finding(WorkloadError.slug, f"the target run trained on {used!r}, not on {run.device!r}: the script does not "
                                       "pick the accelerator it is given (ferry scan shows where it names a device)")
                return True
            return False
        error = (record or {}).get("error") or {}
        where = f" at {error['file']}:{error['line']}: {error.get('code')}" if error.get("file") else ""
        kind = error.get("kind") or WorkloadError.slug  # a crash without a Python exception is the workload's too
        label = ("portability failure: device placement" if error.get("placement") else
                 "out of memory" if kind == DeviceOutOfMemoryError.slug else
                 "missing kernel" if "NotImplementedError" == error.get("type") else f"failed ({error.get('type', 'exit')})")
        message = f"{label}{where}: {error.get('message') or _tail(run.log)}"
        self.report.parity.status = ParityStatus.FAIL_TO_RUN
        self.report.parity.notes.append(message)
        self.finding(kind, message, error.get("traceback"))
        return True

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


def hard_coded_findings(script: str, workdir: Path, timeout: float) -> list[dict]:
    """`ferry scan`'s findings of code that names CUDA (run as its own process: check does not import scan)."""
    out = workdir / "scan.json"
    subprocess.run([sys.executable, "-m", "torchferry", "scan", script, "--format", "json", "--fail-on", "never",
                    "-o", str(out)], capture_output=True, timeout=timeout, check=False,
                   env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    if not out.is_file():
        return []
    return [f for f in json.loads(out.read_text())["findings"] if f["rule_id"] in HARD_CODED]


def build(args: argparse.Namespace, cwd: Path) -> tuple[ScriptCommand, dict]:
    """Validate everything that can be checked before a child starts; the run's configuration."""
    from torchferry.check.config import CostInputs
    from torchferry.harness.prices import instance_for, load_prices
    from torchferry.report.core import ensure_writable

    command = parse_command(list(args.script_command), cwd)
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds (got {args.timeout:g}).")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be at least 1 (got {args.steps}).")
    if args.mode not in ("train", "training"):
        raise UsageError(f"--mode {args.mode} applies to build() workloads (-w); an unchanged script is checked as it "
                         "trains. Drop --mode, or check the model with -w path/to/file.py:build --mode "
                         f"{args.mode}.")
    target, reason = (args.target, "chosen with --target") if args.target else devices.default_target()
    for name in (args.ref, target):
        devices.check_usable(name)
    emulates = script_env.builtin_emulation(target)
    prices = str((cwd / args.prices).resolve()) if args.prices else None
    table = load_prices(prices)
    cost = CostInputs(prices=prices, dtype="float32", eng_hours=args.eng_hours, eng_rate=args.eng_rate,
                      volume=args.volume, ref_instance=instance_for(table, args.ref, args.ref_instance, "--ref-instance"),
                      target_instance=instance_for(table, target, args.target_instance, "--target-instance"))
    output = (cwd / args.output).resolve()
    ensure_writable(output)
    exact = emulates is not None and args.ref == "cpu"
    cfg = {"workload": " ".join(command.given), "mode": "train", "dtype": "as the script", "size": "-",
           "steps": args.steps or "N", "steps_limit": args.steps, "ref": args.ref, "target": target, "target_reason": reason,
           "target_emulates": emulates, "exact": exact, "seed": args.seed if args.seed is not None else DEFAULT_SEED,
           "script_seeded": None, "timeout": float(args.timeout), "output": str(output),
           "cost": dataclasses.asdict(cost)}
    return command, cfg


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.report.check import FORMAT, FORMAT_VERSION
    from torchferry.report.meta import new_meta

    from torchferry.harness.outlock import output_lock

    cwd = Path.cwd()
    command, cfg = build(args, cwd)
    meta = new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", ()))
    with output_lock(Path(cfg["output"]), meta.command):  # one writer per output folder
        return _run_locked(args, env, command, cfg, meta, cwd)


def _run_locked(args: argparse.Namespace, env: Environment, command: ScriptCommand, cfg: dict, meta, cwd: Path) -> ExitStatus:  # noqa: ANN001
    from torchferry.check import verdict
    from torchferry.check.command import environment_of, failure_of
    from torchferry.report import htmlreport, jsonreport, text
    from torchferry.report.check import NO_GO
    from torchferry.report.core import FileReporter, write_reports

    started = time.monotonic()
    report = CheckReport(meta=meta, environment=environment_of(cfg["ref"], cfg["target"], cfg["target_reason"], cfg["seed"]),
                         config=cfg, workload=command.to_dict())
    check = ScriptCheck(args, env, command, report, cwd)
    check.workdir.mkdir(parents=True, exist_ok=True)
    error: BaseException | None = None
    try:
        findings = hard_coded_findings(command.script, check.workdir, cfg["timeout"]) \
            if command.script and cfg["target"].split(":")[0] != "cuda" else []
        if findings:
            first = findings[0]
            message = (f"portability failure: the script names CUDA, so it cannot run on {cfg['target']!r} unchanged: "
                       + "; ".join(f"{f['path']}:{f['line']}: {f['rule_id']} {f['message']} Fix: {f['fix']}"
                                   for f in findings[:5])
                       + f". `ferry scan --fix {first['path']}` rewrites the safe ones; then run the check again.")
            report.workload["scan_findings"] = findings
            report.failure = Failure(kind=WorkloadError.slug, message=message, exit_status=int(ExitStatus.NEGATIVE_RESULT),
                                     phase="scan", finding=True)
            check.note(f"stopped before running: {len(findings)} hard-coded CUDA finding(s)")
        else:
            check.run()
    except BaseException as exc:  # whatever stops the run, the report keeps what was measured and says why
        error = exc
        if isinstance(exc, KeyboardInterrupt):
            error = InterruptedRun("interrupted with Ctrl-C: the children were stopped; the report keeps what they "
                                   "recorded")
        if check.runs:
            check.record_timing()
        report.failure = failure_of(error, check.phase, check.workdir / "ferry.log")
    verdict.decide(report)
    report.meta.wall_s = time.monotonic() - started
    paths = write_reports(report, [FileReporter("report.json", jsonreport.render),
                                   FileReporter("report.html", htmlreport.render)], Path(cfg["output"]))
    env.out(text.render(report, [str(p) for p in paths]).rstrip())
    if error is not None:
        raise error
    return ExitStatus.NEGATIVE_RESULT if report.verdict == NO_GO else ExitStatus.SUCCESS
