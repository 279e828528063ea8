"""The one typed configuration of `ferry check`, built and validated once, before anything runs.

``CheckConfig.build(args, cwd)`` checks everything that can be checked without running the
workload, for every source alike: that each option given applies to the chosen source (the options
table, torchferry.harness.options, refuses the others by name), every number in its range (``nan``
and ``inf`` included), the source itself (the workload spec resolved against the caller's folder,
or the script command parsed), both devices usable here, the price table and the instances,
``--batch-size`` against ``--nproc``, and the output folder. Derived values (tolerance, eval seed,
resume step, instances) are computed here and nowhere else. Workers receive ``to_dict()`` and
rebuild the same frozen object with ``from_dict`` (torchferry.records).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from torchferry.check.sources import ScriptSource, WorkloadSource, parse_command
from torchferry.errors import UsageError
from torchferry.harness import options
from torchferry.harness.modes import EXECUTION, Mode, parse_mode
from torchferry.harness.options import MODEL, PRECISION_DTYPES, PRECISIONS, SCRIPT, WORKLOAD
from torchferry.harness.parity import Tolerance
from torchferry.records import Record

EVAL_SEED_OFFSET = 10_000  # the exit check's eval batch: a seed no timed step uses
WARMUP_ENV = "TORCHFERRY_CHECK_WARMUP"  # 0 skips the warm-up process (check/warm.py); the tests set it
DEFAULT_STEPS = 8  # a build() workload's optimizer steps / forward calls / generate calls
HUB_BUILD = "torchferry.workloads.hub"  # the build() of a model given by name (workloads.protocol.resolve_source)


@dataclass(frozen=True, kw_only=True)
class CostInputs(Record):
    """What the cost estimate needs besides the measured timings."""

    prices: str | None  # the user's --prices file (absolute), merged over the shipped table
    ref_instance: str | None  # resolved: --ref-instance, else the table's default for the device type
    target_instance: str | None
    dtype: str
    eng_hours: float
    eng_rate: float
    volume: float


@dataclass(frozen=True, kw_only=True)
class CheckConfig(Record):
    source: WorkloadSource | ScriptSource
    ref: str
    target: str
    target_reason: str
    seed: int  # weights, batches and draws of a workload; the seed given to a script that does not seed itself
    tolerance: Tolerance
    timeout: float
    device_rng: bool  # the target draws from its own generator instead of the reference's stream (--device-rng)
    cost: CostInputs
    output: str  # absolute

    @property
    def workdir(self) -> Path:
        """Job files, worker logs, records, tensors and checkpoints of this run."""
        return Path(self.output) / "work"

    @property
    def script(self) -> ScriptSource | None:
        return self.source if isinstance(self.source, ScriptSource) else None

    @property
    def workload(self) -> WorkloadSource | None:
        return self.source if isinstance(self.source, WorkloadSource) else None

    def subject(self) -> str:
        """The report's first line: what ran, from where to where."""
        return f"{self.source.describe()} {self.ref} -> {self.target}"

    @classmethod
    def build(cls, args: argparse.Namespace, cwd: Path) -> CheckConfig:
        """Validate the command line and resolve every derived value; raises a typed error before anything runs."""
        from torchferry.harness import devices
        from torchferry.harness.prices import instance_for, load_prices
        from torchferry.report.core import ensure_writable
        from torchferry.workloads.footprint.fit import fit_named_model

        gave = options.given(args, "check")
        args = options.apply_defaults(argparse.Namespace(**vars(args)), "check")
        command = list(getattr(args, "script_command", None) or [])
        if command:
            options.refuse_unused(gave, "check", SCRIPT)
        options.check_values(args, "check")
        target, reason = (args.target, "chosen with --target") if args.target else devices.default_target()
        if command:
            source: WorkloadSource | ScriptSource = ScriptSource(
                command=parse_command(command, cwd), steps_limit=args.steps, emulates=devices.builtin_emulation(target))
            dtype = "float32"
        else:
            source = _workload_source(args, cwd, gave)
            dtype = source.dtype
        for name in (args.ref, target):
            devices.check_usable(name)
        if isinstance(source, WorkloadSource):  # a model by name is sized before anything builds it: exit 6 if too big
            source = fit_named_model(source, target, size=args.size if "size" in gave else None)
        prices = str((cwd / args.prices).resolve()) if args.prices else None
        table = load_prices(prices)
        output = (cwd / args.output).resolve()
        ensure_writable(output)
        mode = source.mode if isinstance(source, WorkloadSource) else Mode.TRAIN
        return cls(
            source=source, ref=args.ref, target=target, target_reason=reason, seed=args.seed,
            tolerance=Tolerance.resolve(mode, dtype, args.tol), timeout=float(args.timeout),
            device_rng=bool(args.device_rng), output=str(output),
            cost=CostInputs(prices=prices, dtype=dtype, eng_hours=args.eng_hours, eng_rate=args.eng_rate,
                            volume=args.volume,
                            ref_instance=instance_for(table, args.ref, args.ref_instance, "--ref-instance"),
                            target_instance=instance_for(table, target, args.target_instance, "--target-instance")))


def _workload_source(args: argparse.Namespace, cwd: Path, gave: set[str]) -> WorkloadSource:
    """The build() workload or named model ``-w`` gives, with the settings of its steps."""
    from torchferry.workloads.protocol import resolve_source

    steps = DEFAULT_STEPS if args.steps is None else args.steps
    warm_up = os.environ.get(WARMUP_ENV, "1")
    if warm_up not in ("0", "1"):
        raise UsageError(f"{WARMUP_ENV}={warm_up!r}: it must be 1 (warm up before the timed workers, the default) or 0.")
    if args.precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {args.precision!r}. Valid: {', '.join(PRECISION_DTYPES)} (and bf16 for "
                         "`ferry plan`).")
    if args.precision not in PRECISION_DTYPES:
        raise UsageError(f"--precision {args.precision} (bf16 everywhere) is a layout `ferry plan` sizes; `ferry check` "
                         f"runs {' or '.join(PRECISION_DTYPES)}. Pass --precision bf16-mixed to check bf16 compute.")
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
    resolved = resolve_source(args.workload, cwd, trust_remote_code=args.trust_remote_code, weights=args.weights)
    kind = MODEL if resolved.get("module") == HUB_BUILD else WORKLOAD
    options.refuse_unused(gave, "check", kind)
    return WorkloadSource(
        kind=kind, spec=args.workload, resolved=resolved, mode=mode, execution=EXECUTION[mode], size=args.size,
        batch_size=args.batch_size, seq_len=args.seq_len, dtype=PRECISION_DTYPES[args.precision], steps=steps,
        new_tokens=args.new_tokens, eval_seed=args.seed + EVAL_SEED_OFFSET, lr=args.lr, compile=args.compile,
        nproc=args.nproc, nnodes=args.nnodes, rdzv_endpoint=args.rdzv_endpoint, rounds=args.rounds, reps=args.reps,
        steady_budget=float(args.steady_budget), trace=args.trace, warm_up=warm_up == "1", resume_step=steps // 2)
