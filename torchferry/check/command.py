"""`ferry check`: prove parity, full time, effective cost and reversible exit; give a verdict.

    ferry check                      # tiny Llama training, cpu -> default target, ./ferry-report/
    ferry check -w gpt2 --mode generate --target cuda
    ferry check -w path/to/my_model.py:build --dtype bfloat16
    ferry check -- python train.py ARGS   # the user's own, unchanged training script (check/script.py)

Light at import: torch is imported inside ``run``.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import time
import traceback
from pathlib import Path

from torchferry import __version__
from torchferry.env import Environment
from torchferry.status import ExitStatus

DTYPES = ("float32", "bfloat16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from torchferry.harness.modes import NAMES

    w = parser.add_argument_group("workload")
    w.add_argument("-w", "--workload", default="llama",
                   help="built-in (llama, gpt2, bert, mlp), path/to/file.py:build (relative to the current folder), "
                        "package.module:build, or a Hugging Face model: a model type (mistral), a config.json or a "
                        "folder holding one, a Hub id org/name[@revision] (config only; random weights) (default: llama)")
    w.add_argument("--weights", action="store_true",
                   help="a Hub id or checkpoint folder given to -w: load its weights (default: random weights)")
    w.add_argument("--trust-remote-code", action="store_true",
                   help="let the model's repository code run (configs with an auto_map), as transformers' "
                        "trust_remote_code; refused without it")
    w.add_argument("--mode", choices=NAMES, default="train", metavar="MODE",
                   help="train, forward or generate (also: training, inference, generation) (default: train)")
    w.add_argument("--size", choices=("tiny", "small", "base"), default="tiny", help="built-in model size (default: tiny)")
    w.add_argument("--batch-size", type=int, help="batch size (default: the workload's)")
    w.add_argument("--seq-len", type=int, help="sequence length in tokens (default: the workload's)")
    w.add_argument("--dtype", choices=DTYPES, default="float32", help="float32, or bfloat16 autocast (default: float32)")
    w.add_argument("--steps", type=int, default=None,
                   help="optimizer steps / forward calls / generate calls (default: 8); with `-- COMMAND`, stop the "
                        "script cleanly after N optimizer steps (default: run it to its end)")
    w.add_argument("--new-tokens", type=int, default=8, help="tokens per generate call, greedy (default: 8)")
    w.add_argument("--seed", type=int, default=None,
                   help="seed of weights and batches (default: 1337); with `-- COMMAND`, the seed given to a script "
                        "that does not seed its RNGs")
    w.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate in train mode (default: 1e-3)")
    d = parser.add_argument_group("devices")
    d.add_argument("--ref", default="cpu", help="reference device (default: cpu)")
    d.add_argument("--target", help="device to check (default: real neuron, else the current accelerator, else the built-in neuron)")
    d.add_argument("--compile", metavar="BACKEND", help="torch.compile the target with this backend (the reference stays eager)")
    d.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="run the target data-parallel (DDP) in N processes per node through torch.distributed.run, "
                        "each on 1/N of every batch; the reference stays one process on the whole batch (default: 1)")
    d.add_argument("--nnodes", type=int, default=1, metavar="N",
                   help="nodes of the target's process group; this one is node 0 (default: 1; needs --rdzv-endpoint)")
    d.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="rendezvous of the target's ranks, reachable from every node (default: a free local port)")
    m = parser.add_argument_group("measurement")
    m.add_argument("--tol", type=float, help="parity tolerance (default: per mode and dtype, docs/check/parity.md)")
    m.add_argument("--rounds", type=int, default=3, help="interleaved steady-state rounds (default: 3)")
    m.add_argument("--reps", type=int, default=3, help="repetitions per device per round (default: 3)")
    m.add_argument("--steady-budget", type=float, default=30, metavar="SECONDS",
                   help="when a real target's steady-state figures are unstable after --rounds, add rounds until they "
                        "are stable or this many seconds are spent (default: 30; 0 adds none)")
    m.add_argument("--timeout", type=float, default=600, help="seconds a worker may take per phase (default: 600)")
    m.add_argument("--profile", action="store_true",
                   help="write one torch.profiler Chrome trace per device (CPU and device activity) over a few steady "
                        "steps after the timed ones, into the report folder")
    c = parser.add_argument_group("cost")
    c.add_argument("--prices", metavar="FILE", help="TOML price table merged over the shipped one")
    c.add_argument("--ref-instance", help="price-table instance for the reference (default: by device type, if any)")
    c.add_argument("--target-instance", help="price-table instance for the target (default: by device type)")
    c.add_argument("--eng-hours", type=float, default=40, help="engineering hours the migration costs (default: 40)")
    c.add_argument("--eng-rate", type=float, default=150, help="engineering cost in USD per hour (default: 150)")
    c.add_argument("--volume", type=float, default=1e9, help="tokens (or samples) per month to amortise over (default: 1e9)")
    o = parser.add_argument_group("output")
    o.add_argument("-o", "--output", default="ferry-report", help="report folder (default: ./ferry-report)")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("script_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="check your own, unchanged training script: `-- python train.py ARGS`, `-- python -m pkg "
                             "ARGS`, `-- torchrun ... train.py ARGS` or `-- accelerate launch ... train.py ARGS`")


def environment(cfg) -> dict:  # noqa: ANN001 - CheckConfig, imported lazily
    return {**environment_of(cfg.ref, cfg.target, cfg.target_reason, cfg.seed),
            "seeds": {"weights_and_batches": cfg.seed, "eval_batch": cfg.eval_seed}}


def environment_of(ref: str, target: str, target_reason: str, seed: int) -> dict:
    """The report's environment block: versions, host and the devices compared."""
    import importlib.metadata as md

    import torch

    def version(package: str) -> str | None:
        try:
            return md.version(package)
        except md.PackageNotFoundError:
            return None

    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
        "torch": torch.__version__, "transformers": version("transformers"), "safetensors": version("safetensors"),
        "torchferry": __version__, "cpu_threads": torch.get_num_threads(),
        "devices": {"ref": ref, "target": target, "target_reason": target_reason}, "seeds": {"start": seed},
    }


def failure_of(exc: BaseException, phase: str, log: Path):  # noqa: ANN201 - a report.check.Failure
    """What stopped the run, in the report's words: an error slug, ``interrupted``, or ``internal`` for a bug."""
    from torchferry.errors import FerryError, InterruptedRun
    from torchferry.harness.signals import stopped_by
    from torchferry.report.meta import Failure

    if isinstance(exc, FerryError):
        kind, status = exc.slug, exc.exit_status
    elif isinstance(exc, KeyboardInterrupt):
        kind, status = InterruptedRun.slug, ExitStatus.INTERRUPTED
    else:
        kind, status = "internal", ExitStatus.INTERNAL_ERROR
    if isinstance(exc, KeyboardInterrupt):
        text = f"stopped by {stopped_by(exc)}; the workers were stopped and what finished is kept"
    else:
        text = str(exc) or type(exc).__name__
    return Failure(kind=kind, message=text if kind != "internal" else f"{type(exc).__name__}: {text} (a bug in torchferry)",
                   exit_status=int(status), phase=phase, log=str(log), traceback=getattr(exc, "user_traceback", None))


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.check.config import CheckConfig
    from torchferry.harness.outlock import output_lock
    from torchferry.report.check import FORMAT, FORMAT_VERSION
    from torchferry.report.meta import new_meta

    if args.script_command:
        from torchferry.check import script_runner

        return script_runner.run(args, env)
    cfg = CheckConfig.build(args, Path.cwd())  # every usage, device and output error is raised here, before any worker
    meta = new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", ()))
    with output_lock(Path(cfg.output), meta.command) as took_over:  # one writer per output folder
        return _run_locked(args, env, cfg, meta, took_over)


def _run_locked(args: argparse.Namespace, env: Environment, cfg, meta, took_over: str | None) -> ExitStatus:  # noqa: ANN001
    from torchferry.check import verdict
    from torchferry.check.runner import Runner, log_path
    from torchferry.errors import FerryError, OutputError, disk_full
    from torchferry.report import text
    from torchferry.report.check import NO_GO, CheckReport

    started = time.monotonic()
    report = CheckReport(meta=meta, environment=environment(cfg), config=cfg.to_dict())
    log = log_path(cfg)
    log.parent.mkdir(parents=True, exist_ok=True)

    def note(message: str) -> None:
        report.progress.append(message)
        try:
            with open(log, "a") as f:
                f.write(message + "\n")
        except OSError:
            pass  # a full disk: the line is still in the report's progress and on stderr
        if not args.quiet:
            env.err(f"ferry check: {message}")

    if took_over:
        note(took_over)
    if cfg.target_reason != "chosen with --target":
        note(f"target {cfg.target}: {cfg.target_reason}")
    runner = Runner(report, cfg, note)
    error: BaseException | None = None
    try:
        runner.run()
    except BaseException as exc:  # whatever stops the run, the report keeps what was measured and says why
        error = exc
        if not isinstance(exc, FerryError) and disk_full(exc):  # this process could not write a job file
            error = OutputError(f"the disk holding {cfg.workdir} is full ({exc}). Free space there, or pass an --output "
                                "DIR on a disk with room.")
            error.__cause__ = exc
        report.failure = failure_of(error, runner.phase, log)
        if report.failure.kind == "internal":
            with contextlib.suppress(OSError), open(log, "a") as f:
                f.write(traceback.format_exc())
        runner.kill_all()
    verdict.decide(report)
    report.meta.wall_s = time.monotonic() - started
    outdir = Path(cfg.output)
    paths, unwritten = write_each(report, outdir)
    if any(disk_full(exc, outdir) for _, exc in unwritten):  # make room: this run's scratch tensors are spent
        freed = runner.free_scratch()
        report.progress.append(f"the disk holding {outdir} is full: removed this run's scratch files to make room for "
                               f"the report ({freed})")
        paths, unwritten = write_each(report, outdir)
    env.out(text.render(report, [str(p) for p in paths]).rstrip())  # the summary, even when no file could be written
    for name, exc in unwritten:
        env.err(f"ferry check: {name} could not be written to {str(outdir)!r} ({exc.strerror or exc}); the summary above "
                "is all that was kept of it")
    if error is not None:
        raise error
    if unwritten:
        raise OutputError(f"{', '.join(n for n, _ in unwritten)} could not be written to {str(outdir)!r}. Free space "
                          "there, or pass an --output DIR on a disk with room.")
    return ExitStatus.NEGATIVE_RESULT if report.verdict == NO_GO else ExitStatus.SUCCESS


def write_each(report, outdir: Path) -> tuple[list[Path], list[tuple[str, OSError]]]:  # noqa: ANN001 - a CheckReport
    """Write report.json, then report.html, each on its own: the one that fails does not take the other with it."""
    from torchferry.report import htmlreport, jsonreport
    from torchferry.report.core import write_atomic

    written, unwritten = [], []
    for name, render in (("report.json", jsonreport.render), ("report.html", htmlreport.render)):
        try:
            written.append(write_atomic(outdir / name, render(report)))
        except OSError as exc:
            unwritten.append((name, exc))
    return written, unwritten
