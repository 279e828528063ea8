"""What a check runs, typed: a ``build()`` workload or a model by name (``WorkloadSource``), or a script (``ScriptSource``).

A check has one source. The worker pipeline (check/runner.py) builds and steps a ``WorkloadSource``
itself; the script pipeline (check/script/) runs a ``ScriptSource``'s command unchanged. Each source
holds the settings only it reads (the options table, torchferry.harness.options, refuses the others
by name), and both are built once, by ``CheckConfig.build`` (check/config.py), and cross to workers as
records (torchferry.records).

``parse_command`` validates the command after ``--`` before anything starts: the interpreter or
launcher, the script file or module it runs, the processes a launcher starts, and a per-side device
placeholder (``{device}``) that a script taking its device as an argument gets (docs/check/scripts.md).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError
from torchferry.harness.case import StepPlan
from torchferry.harness.modes import Mode
from torchferry.records import Record

PYTHONS = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")
# launchers whose script is their first argument that ends in .py (or follows -m)
LAUNCHERS = {"torchrun": "torchrun", "accelerate": "accelerate launch"}
INTERPRETER_OPTIONS_WITH_VALUE = ("-W", "-X", "-Q")
DEVICE_PLACEHOLDER = "{device}"  # replaced, in each side's command, by that side's device


@dataclass(frozen=True, kw_only=True)
class WorkloadSource(Record):
    """A workload torchferry builds and steps: a ``build()`` function (``kind`` workload) or a model by name (model),
    with the settings of its steps."""

    kind: str  # workload | model (torchferry.harness.options' source names)
    spec: str  # as given to -w
    resolved: dict  # where its build() lives, resolved against the caller's folder (workloads.protocol.resolve_source)
    mode: Mode
    execution: str  # how the mode runs the model (harness/modes.py EXECUTION), stated in the report
    size: str
    batch_size: int | None
    seq_len: int | None
    dtype: str  # the autocast dtype of the steps: float32 or bfloat16 (--precision)
    steps: int
    new_tokens: int
    eval_seed: int
    lr: float
    compile: str | None
    nproc: int
    nnodes: int
    rdzv_endpoint: str | None
    rounds: int
    reps: int
    steady_budget: float  # seconds of extra steady-state rounds while a real target's figures are unstable
    trace: bool  # one torch.profiler trace per device over a few steps after the timed ones
    warm_up: bool  # a throwaway process imports and builds everything before the timed workers
    resume_step: int  # the checkpoint is saved after this step; 0 (--steps 1): no step is left to resume

    @property
    def world(self) -> int:
        """The target's processes: ``--nproc`` on each of ``--nnodes`` nodes (the reference runs one)."""
        return self.nproc * self.nnodes

    def workload_options(self) -> dict:
        """The options offered to the workload's ``build()`` (the protocol's names, workloads/protocol.py)."""
        return {"size": self.size, "batch_size": self.batch_size, "seq_len": self.seq_len, "mode": self.mode}

    def step_plan(self, seed: int) -> StepPlan:
        """How each worker's case runs its steps: derived here, once, from the validated values."""
        return StepPlan(mode=self.mode, seed=seed, steps=self.steps, dtype=self.dtype, lr=self.lr,
                        new_tokens=self.new_tokens, eval_seed=self.eval_seed)

    def load(self) -> Any:
        """The workload, built in the worker with these options; a generate run needs its ``generate`` (only the
        built workload can say whether it has one)."""
        from torchferry.workloads.protocol import load_workload

        workload = load_workload(self.spec, self.workload_options(), self.resolved)
        if self.mode == Mode.GENERATE and not workload.generates:
            raise UsageError(f"workload {self.spec!r} does not generate (no `generate`). Valid modes for it: train, forward.")
        return workload

    def describe(self) -> str:
        return f"{self.spec} ({self.mode}, {self.dtype}, {self.steps} steps, size {self.size})"


@dataclass(frozen=True, kw_only=True)
class ScriptCommand(Record):
    """The user's command: as given, as run, which launcher, the script (file or module) it runs, and whether it
    carries the per-side device placeholder."""

    given: tuple[str, ...]
    argv: tuple[str, ...]
    launcher: str  # python | python -m | torchrun | accelerate launch | other
    script: str | None  # absolute path of the script file, when the command names one
    module: str | None  # python -m MODULE
    nproc: int  # processes the launcher starts (1 for python)

    @property
    def placeholder(self) -> bool:
        return any(DEVICE_PLACEHOLDER in a for a in self.argv)

    def argv_for(self, device: str) -> list[str]:
        """The command one side runs: the placeholder replaced by that side's device."""
        return [a.replace(DEVICE_PLACEHOLDER, device) for a in self.argv]

    def shown(self) -> str:
        return " ".join(self.given)


@dataclass(frozen=True, kw_only=True)
class ScriptSource(Record):
    """An unchanged script run as its command says, on each side (check/script/)."""

    kind: str = "script"
    command: ScriptCommand
    steps_limit: int | None  # --steps: stop the script cleanly after this many optimizer steps
    emulates: str | None  # what the target emulates when it is torchferry's built-in device here, else None

    def describe(self) -> str:
        steps = f", stopped after {self.steps_limit} optimizer steps" if self.steps_limit else ""
        return f"{self.command.shown()} (unchanged script via {self.command.launcher}{steps})"


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
        if name == "accelerate" and (not rest or rest[0] != "launch"):
            raise UsageError(f"`accelerate {' '.join(rest[:1])}`: only `accelerate launch ... train.py` runs a "
                             "script. Give the command as `ferry check -- accelerate launch train.py ARGS`.")
        if shutil.which(exe) is None:
            raise UsageError(f"{exe!r} is not on PATH. Install it, or run the script with `python -m "
                             f"{'torch.distributed.run' if name == 'torchrun' else 'accelerate.commands.launch'} ...`.")
    elif (cwd / exe).is_file() and not os.access(cwd / exe, os.X_OK):
        raise UsageError(f"{exe!r} is a file, not a command: give the interpreter that runs it, "
                         f"`ferry check -- python {' '.join(tokens)}`.")
    elif shutil.which(exe) is None and not (cwd / exe).is_file():
        raise UsageError(f"{exe!r}: no such command or file (looked on PATH and in {cwd}). Give the training command "
                         "as you run it, e.g. `ferry check -- python train.py ARGS`.")
    unknown = sorted({m for t in tokens for m in re.findall(r"\{[A-Za-z_]+\}", t)} - {DEVICE_PLACEHOLDER})
    if unknown:
        raise UsageError(f"{', '.join(unknown)} in the command is no placeholder torchferry fills: the one it knows is "
                         f"{DEVICE_PLACEHOLDER} (each side's device, e.g. `--device {DEVICE_PLACEHOLDER}`). Correct it, or "
                         "quote the braces differently if the script itself wants them.")
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
