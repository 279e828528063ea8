"""The one typed configuration of `ferry check`, built and validated once, before any worker starts.

``CheckConfig.build(args, cwd)`` checks everything that can be checked without running the
workload: numbers in range, the workload spec (resolved against the caller's working
directory), both devices usable here, the price table and the instances, ``--batch-size``
against ``--nproc``, and the output folder. Derived values (tolerance, eval seed, resume
step, instances) are computed here and nowhere else. Workers receive ``to_dict()`` and
rebuild the same frozen object with ``from_dict``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError
from torchferry.harness.case import StepPlan
from torchferry.harness.modes import EXECUTION, Mode, parse_mode
from torchferry.harness.parity import Tolerance

EVAL_SEED_OFFSET = 10_000  # the exit check's eval batch: a seed no timed step uses
WARMUP_ENV = "TORCHFERRY_CHECK_WARMUP"  # 0 skips the warm-up process (check/warm.py); the tests set it
DTYPES = ("float32", "bfloat16")
DEFAULT_STEPS = 8  # a build() workload's optimizer steps / forward calls / generate calls
DEFAULT_SEED = 1337


@dataclass(frozen=True, kw_only=True)
class CostInputs:
    """What the cost estimate needs besides the measured timings."""

    prices: str | None  # the user's --prices file (absolute), merged over the shipped table
    ref_instance: str | None  # resolved: --ref-instance, else the table's default for the device type
    target_instance: str | None
    dtype: str
    eng_hours: float
    eng_rate: float
    volume: float


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    workload: str  # the spec as given
    workload_source: dict  # where its build() lives, resolved against the caller's working directory
    mode: Mode
    execution: str  # how the mode runs the model (harness/modes.py EXECUTION), stated in the report
    size: str
    batch_size: int | None
    seq_len: int | None
    dtype: str
    steps: int
    new_tokens: int
    seed: int
    eval_seed: int
    lr: float
    ref: str
    target: str
    target_reason: str
    compile: str | None
    nproc: int
    nnodes: int
    rdzv_endpoint: str | None
    tolerance: Tolerance
    rounds: int
    reps: int
    steady_budget: float  # seconds of extra steady-state rounds while a real target's figures are unstable
    timeout: float
    profile: bool  # one torch.profiler trace per device over a few steps after the timed ones
    warm_up: bool  # a throwaway process imports and builds everything before the timed workers
    resume_step: int  # the checkpoint is saved after this step; 0 (--steps 1): no step is left to resume
    cost: CostInputs
    output: str  # absolute

    @property
    def world(self) -> int:
        """The target's processes: ``--nproc`` on each of ``--nnodes`` nodes (the reference runs one)."""
        return self.nproc * self.nnodes

    @property
    def workdir(self) -> Path:
        return Path(self.output) / "work"

    def workload_options(self) -> dict:
        """The options offered to the workload's ``build()`` (the protocol's names, workloads/protocol.py)."""
        return {"size": self.size, "batch_size": self.batch_size, "seq_len": self.seq_len, "mode": self.mode}

    def step_plan(self) -> StepPlan:
        """How each worker's case runs its steps: derived here, once, from the validated values."""
        return StepPlan(mode=self.mode, seed=self.seed, steps=self.steps, dtype=self.dtype, lr=self.lr,
                        new_tokens=self.new_tokens, eval_seed=self.eval_seed)

    def load_workload(self) -> Any:
        """The workload, built in the worker with this config's options; a generate run needs its ``generate``
        (only the built workload can say whether it has one)."""
        from torchferry.workloads.protocol import load_workload

        workload = load_workload(self.workload, self.workload_options(), self.workload_source)
        if self.mode == Mode.GENERATE and not workload.generates:
            raise UsageError(f"workload {self.workload!r} does not generate (no `generate`). Valid modes for it: train, forward.")
        return workload

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["tolerance"] = self.tolerance.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CheckConfig:
        tol = data["tolerance"]
        return cls(**{**data, "mode": Mode(data["mode"]), "cost": CostInputs(**data["cost"]),
                      "tolerance": Tolerance(tol=tol["tol"], source=tol["source"], dtype=tol["dtype"])})

    @classmethod
    def build(cls, args: argparse.Namespace, cwd: Path) -> CheckConfig:
        """Validate the command line and resolve every derived value; raises a typed error before any worker."""
        # --steps and --seed default to None on the command line (for a script, no --steps means "to its end")
        args = argparse.Namespace(**{**vars(args), "steps": DEFAULT_STEPS if args.steps is None else args.steps,
                                     "seed": DEFAULT_SEED if args.seed is None else args.seed})
        from torchferry.harness import bounds, devices
        from torchferry.harness.prices import instance_for, load_prices
        from torchferry.report.core import ensure_writable
        from torchferry.workloads.protocol import resolve_source

        bounds.check_all({
            **{f"--{name.replace('_', '-')}": (getattr(args, name), bounds.COUNT)
               for name in ("steps", "rounds", "reps", "new_tokens", "nproc", "nnodes", "batch_size", "seq_len")},
            "--seed": (args.seed, bounds.SEED), "--lr": (args.lr, bounds.POSITIVE), "--tol": (args.tol, bounds.POSITIVE),
            "--timeout": (args.timeout, bounds.SECONDS),
            "--steady-budget": (args.steady_budget, bounds.Bound(low=0, why="0 adds no rounds.")),
            "--eng-hours": (args.eng_hours, bounds.NON_NEGATIVE), "--eng-rate": (args.eng_rate, bounds.NON_NEGATIVE),
            "--volume": (args.volume, bounds.POSITIVE),
        })
        warm_up = os.environ.get(WARMUP_ENV, "1")
        if warm_up not in ("0", "1"):
            raise UsageError(f"{WARMUP_ENV}={warm_up!r}: it must be 1 (warm up before the timed workers, the default) or 0.")
        if args.steady_budget < 0:
            raise UsageError(f"--steady-budget must be 0 or more seconds (got {args.steady_budget:g}); 0 adds no rounds.")
        mode = parse_mode(args.mode)
        world = args.nproc * args.nnodes
        if world > 1 and mode == Mode.GENERATE:
            raise UsageError(f"--nproc {args.nproc} applies to train and forward, not generate (greedy tokens are "
                             "compared for the whole batch). Use --mode train or forward, or --nproc 1.")
        if args.nnodes > 1 and not args.rdzv_endpoint:
            raise UsageError(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT, the rendezvous every node joins.")
        if args.batch_size is not None and args.batch_size % world:
            raise UsageError(f"the batch size {args.batch_size} does not split into {world} equal shards (--nproc "
                             f"{args.nproc} x --nnodes {args.nnodes}). Pass a --batch-size that is a multiple of {world}.")
        source = resolve_source(args.workload, cwd, trust_remote_code=getattr(args, "trust_remote_code", False),
                                weights=getattr(args, "weights", False))
        target, reason = (args.target, "chosen with --target") if args.target else devices.default_target()
        for name in (args.ref, target):
            devices.check_usable(name)
        prices = str((cwd / args.prices).resolve()) if args.prices else None
        table = load_prices(prices)
        output = (cwd / args.output).resolve()
        ensure_writable(output)
        tolerance = Tolerance.resolve(mode, args.dtype, args.tol)
        return cls(
            workload=args.workload, workload_source=source, mode=mode, execution=EXECUTION[mode], size=args.size,
            batch_size=args.batch_size, seq_len=args.seq_len, dtype=args.dtype, steps=args.steps,
            new_tokens=args.new_tokens, seed=args.seed,
            eval_seed=args.seed + EVAL_SEED_OFFSET, lr=args.lr, ref=args.ref, target=target, target_reason=reason,
            compile=args.compile, nproc=args.nproc, nnodes=args.nnodes, rdzv_endpoint=args.rdzv_endpoint,
            tolerance=tolerance, rounds=args.rounds, reps=args.reps, steady_budget=float(args.steady_budget),
            timeout=float(args.timeout), profile=args.profile, warm_up=warm_up == "1",
            resume_step=args.steps // 2, output=str(output),
            cost=CostInputs(prices=prices, dtype=args.dtype, eng_hours=args.eng_hours, eng_rate=args.eng_rate,
                            volume=args.volume,
                            ref_instance=instance_for(table, args.ref, args.ref_instance, "--ref-instance"),
                            target_instance=instance_for(table, target, args.target_instance, "--target-instance")),
        )
