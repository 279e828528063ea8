"""`ferry check [options] -- COMMAND...`: the decision test of the user's own, unchanged training script.

    ferry check -- python train.py --epochs 1
    ferry check --steps 20 -- torchrun --nproc-per-node 2 train_fsdp.py
    ferry check -- accelerate launch train.py

The command runs unchanged in child processes: once on the reference (twice when the target is
real hardware, for the reference's own run-to-run spread) and once on the target, each in an
environment where the script's usual device detection finds that device
(torchferry/harness/script_env.py). The recorders (torchferry/harness/script_recorder.py) are
installed in every process of the command through the ``torch.backends`` autoload entry point,
switched on by ``TORCHFERRY_RECORD``. This module validates the command, runs the children, and
hands their records to check/script_judge.py, which fills the one result model of `ferry check`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from torchferry.check.config import DEFAULT_SEED  # also the seed given to a script that does not seed its RNGs
from torchferry.errors import StepTimeoutError, UsageError
from torchferry.harness import script_recorder as recorder

PYTHONS = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")
# launchers whose script is their first argument that ends in .py (or follows -m)
LAUNCHERS = {"torchrun": "torchrun", "accelerate": "accelerate launch"}
INTERPRETER_OPTIONS_WITH_VALUE = ("-W", "-X", "-Q")
HARD_CODED = ("TF001", "TF002", "TF006")  # ferry scan's rules for code that names CUDA and fails elsewhere
GRACE_S = 10.0  # SIGTERM -> SIGKILL


@dataclass(frozen=True)
class ScriptCommand:
    """The user's command: as given, as run, which launcher, and the script (file or module) it runs."""

    given: tuple[str, ...]
    argv: tuple[str, ...]
    launcher: str  # python | python -m | torchrun | accelerate launch | other
    script: str | None  # absolute path of the script file, when the command names one
    module: str | None  # python -m MODULE
    nproc: int  # processes the launcher starts (1 for python)

    def to_dict(self) -> dict:
        return {"kind": "script", "command": list(self.given), "run_as": list(self.argv), "launcher": self.launcher,
                "script": self.script, "module": self.module, "nproc": self.nproc}


def parse_command(tokens: list[str], cwd: Path) -> ScriptCommand:
    """Validate the command after ``--``; raises UsageError before anything starts."""
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    if not tokens or not any(t.strip() for t in tokens):
        raise UsageError("no command after `--`. Give the training command as you run it, e.g. "
                         "`ferry check -- python train.py ARGS` (also `python -m pkg`, `torchrun ... train.py`, "
                         "`accelerate launch ... train.py`).")
    exe, rest = tokens[0], list(tokens[1:])
    name = Path(exe).name
    launcher, argv0 = "other", [exe]
    if name in PYTHONS or Path(exe).resolve() == Path(sys.executable).resolve():
        launcher, argv0 = "python", [sys.executable]  # the interpreter ferry runs in: its recorders are installed
    elif name in LAUNCHERS:
        launcher = LAUNCHERS[name]
        if name == "accelerate":
            if not rest or rest[0] != "launch":
                raise UsageError(f"`accelerate {' '.join(rest[:1])}`: only `accelerate launch ... train.py` runs a "
                                 "script. Give the command as `ferry check -- accelerate launch train.py ARGS`.")
        if shutil.which(exe) is None:
            raise UsageError(f"{exe!r} is not on PATH. Install it, or run the script with `python -m "
                             f"{'torch.distributed.run' if name == 'torchrun' else 'accelerate.commands.launch'} ...`.")
    elif shutil.which(exe) is None and not (cwd / exe).is_file():
        raise UsageError(f"{exe!r}: no such command or file. Give the training command as you run it, "
                         "e.g. `ferry check -- python train.py ARGS`.")
    script, module = _script_of(rest, launcher)
    if launcher == "python" and script is None and module is None:
        raise UsageError(f"`{' '.join(tokens)}` runs no script file or module. Give `python train.py ARGS` or "
                         "`python -m package ARGS`.")
    if script is not None:
        path = (cwd / script).resolve()
        if not path.is_file():
            raise UsageError(f"the script {script!r} does not exist (looked in {cwd}). Check the path, or run ferry "
                             "from the folder you run the script from.")
        script = str(path)
    return ScriptCommand(given=tuple(tokens), argv=(*argv0, *rest), launcher=launcher, script=script, module=module,
                         nproc=_nproc(rest) if launcher != "python" else 1)


def _script_of(args: list[str], launcher: str) -> tuple[str | None, str | None]:
    """(script file, module) of a python/torchrun/accelerate command line."""
    i = 1 if launcher == "accelerate launch" else 0
    while i < len(args):
        a = args[i]
        if a in ("-m", "--module"):
            return None, args[i + 1] if i + 1 < len(args) else None
        if a == "-c":
            return None, None
        if a.endswith(".py") and not a.startswith("-"):
            return a, None
        if not a.startswith("-") and launcher == "python":
            return a, None  # python runs its first non-option argument
        if launcher == "python" and a in INTERPRETER_OPTIONS_WITH_VALUE:
            i += 1
        i += 1
    return None, None


def _nproc(args: list[str]) -> int:
    for i, a in enumerate(args):
        for flag in ("--nproc-per-node", "--nproc_per_node", "--num_processes", "--num-processes"):
            if a == flag and i + 1 < len(args) and args[i + 1].isdigit():
                return int(args[i + 1])
            if a.startswith(flag + "=") and a.split("=", 1)[1].isdigit():
                return int(a.split("=", 1)[1])
    return 1


@dataclass
class ChildRun:
    """One run of the command on one device: its exit, its times and the records of its processes."""

    role: str  # ref | ref-repeat | target
    device: str
    folder: Path
    log: Path
    returncode: int | None = None
    wall_s: float | None = None
    timed_out: bool = False
    interrupted: bool = False
    records: list[dict] = field(default_factory=list)

    def main_record(self) -> dict | None:
        """Rank 0's record (or the only process that trained)."""
        ranked = sorted(self.records, key=lambda r: (r.get("rank") or 0, -len(r.get("losses") or [])))
        return ranked[0] if ranked else None

    def load(self) -> None:
        self.records = []
        for path in sorted(self.folder.glob("record-*.json")):
            with_tensors = path.with_suffix(".pt")
            record = json.loads(path.read_text())
            record["_tensors"] = str(with_tensors) if with_tensors.is_file() else None
            self.records.append(record)


def run_child(run: ChildRun, command: ScriptCommand, env: dict[str, str], cwd: Path, timeout: float,
              note: callable) -> ChildRun:
    """Run the command once, to its end or until ``timeout``; SIGTERM (the recorders then write) before SIGKILL."""
    run.folder.mkdir(parents=True, exist_ok=True)
    for old in run.folder.glob("record-*"):
        old.unlink()
    env = {**env, recorder.RECORD_ENV: str(run.folder), recorder.T0_ENV: repr(time.time())}
    started = time.monotonic()
    with open(run.log, "w") as log:
        # stdin is a pipe never written: a script that reads it waits, as it would in a batch job, until --timeout
        proc = subprocess.Popen(list(command.argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE, start_new_session=True)
        try:
            run.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            note(f"[{run.role} {run.device}] still running after --timeout {timeout:g} s: stopping it")
            run.returncode = _stop(proc)
        except BaseException:  # Ctrl-C (or anything else that stops ferry): stop the command too, keep its records
            run.interrupted = True
            _stop(proc)
            run.wall_s = time.monotonic() - started
            run.load()
            raise
        finally:
            if proc.stdin:
                proc.stdin.close()
    run.wall_s = time.monotonic() - started
    run.load()
    return run


def _stop(proc: subprocess.Popen) -> int | None:
    """SIGTERM the command's process group (the recorders write their records), SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def timeout_error(run: ChildRun, timeout: float) -> StepTimeoutError:
    steps = (run.main_record() or {}).get("steps", 0)
    return StepTimeoutError(f"the {run.role} run on {run.device!r} was still running after --timeout {timeout:g} s "
                            f"({steps} optimizer steps recorded; kept in the report). A script that reads stdin or "
                            "waits forever is stopped here; pass --steps N to stop it after N optimizer steps.")
