"""`ferry check`: prove parity, full time, effective cost and reversible exit; give a verdict.

    ferry check                      # tiny Llama training, cpu -> default target, ./ferry-report/
    ferry check -w gpt2 --mode generation --target cuda
    ferry check -w path/to/my_model.py:build --dtype bfloat16

Light at import: torch is imported inside ``run``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

from torchferry import __version__
from torchferry.env import Environment
from torchferry.errors import DeviceUnavailableError, FerryError, OutputError
from torchferry.status import ExitStatus

MODES = ("training", "inference", "generation")
DTYPES = ("float32", "bfloat16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    w = parser.add_argument_group("workload")
    w.add_argument("-w", "--workload", default="llama",
                   help="built-in (llama, gpt2, bert, mlp), path/to/file.py:build or package.module:build (default: llama)")
    w.add_argument("--mode", choices=MODES, default="training", help="what to run (default: training)")
    w.add_argument("--size", choices=("tiny", "small", "base"), default="tiny", help="built-in model size (default: tiny)")
    w.add_argument("--batch-size", type=int, help="batch size (default: the workload's)")
    w.add_argument("--seq-len", type=int, help="sequence length in tokens (default: the workload's)")
    w.add_argument("--dtype", choices=DTYPES, default="float32", help="float32, or bfloat16 autocast (default: float32)")
    w.add_argument("--steps", type=int, default=8, help="optimizer steps / forward calls / generate calls (default: 8)")
    w.add_argument("--new-tokens", type=int, default=8, help="tokens per generate call, greedy (default: 8)")
    w.add_argument("--seed", type=int, default=1337, help="seed of weights and batches (default: 1337)")
    w.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate in training mode (default: 1e-3)")
    d = parser.add_argument_group("devices")
    d.add_argument("--ref", default="cpu", help="reference device (default: cpu)")
    d.add_argument("--target", help="device to check (default: real neuron, else the current accelerator, else the built-in neuron)")
    d.add_argument("--compile", metavar="BACKEND", help="torch.compile the target with this backend (the reference stays eager)")
    d.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="run the target data-parallel (DDP) in N processes, each on 1/N of every batch; the reference "
                        "stays one process on the whole batch (default: 1)")
    m = parser.add_argument_group("measurement")
    m.add_argument("--tol", type=float, help="parity tolerance (default: per mode and dtype, docs/check/parity.md)")
    m.add_argument("--rounds", type=int, default=3, help="interleaved steady-state rounds (default: 3)")
    m.add_argument("--reps", type=int, default=3, help="repetitions per device per round (default: 3)")
    m.add_argument("--timeout", type=float, default=600, help="seconds a worker may take per phase (default: 600)")
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


def config_from(args: argparse.Namespace) -> dict:
    """The resolved configuration, written into the report as is."""
    from torchferry.check import devices

    from torchferry.errors import UsageError

    for name in ("steps", "rounds", "reps", "new_tokens", "nproc"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)}).")
    if args.nproc > 1 and args.mode == "generation":
        raise UsageError(f"--nproc {args.nproc} applies to training and inference, not generation (greedy tokens are "
                         "compared for the whole batch). Use --mode training or inference, or --nproc 1.")
    target, reason = (args.target, "chosen with --target") if args.target else devices.default_target()
    cfg = {k: getattr(args, k) for k in (
        "workload", "mode", "size", "batch_size", "seq_len", "dtype", "steps", "new_tokens", "seed", "lr", "ref", "compile", "nproc",
        "tol", "rounds", "reps", "timeout", "prices", "ref_instance", "target_instance", "eng_hours", "eng_rate", "volume")}
    cfg.update(target=target, target_reason=reason, resume_step=max(1, args.steps // 2), output=str(args.output))
    return cfg


def check_device_name(name: str) -> None:
    """Reject names torch cannot parse and no known package provides, before starting any process."""
    import torch

    from torchferry.check import devices

    try:
        torch.device(name)
    except RuntimeError:
        if name.split(":")[0] not in devices.BACKEND_PROVIDERS:
            raise DeviceUnavailableError(
                f"unknown device {name!r}. Valid here: {', '.join(devices.available_devices())} (any registered "
                "PrivateUse1 name also works). Pass one of them to --ref/--target."
            ) from None


def environment(cfg: dict) -> dict:
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
        "devices": {"ref": cfg["ref"], "target": cfg["target"], "target_reason": cfg["target_reason"]},
        "seeds": {"weights_and_batches": cfg["seed"], "eval_batch": cfg["seed"] + 10_000},
    }


def write_reports(report, outdir: Path) -> list[str]:
    from torchferry.report import htmlreport, jsonreport
    from torchferry.report.core import write_atomic

    try:
        return [str(write_atomic(outdir / "report.json", jsonreport.render(report))),
                str(write_atomic(outdir / "report.html", htmlreport.render(report)))]
    except OSError as exc:
        raise OutputError(f"the report could not be written to {str(outdir)!r} ({exc}); pass a writable --output DIR.") from exc


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.check import verdict
    from torchferry.check.results import FORMAT_VERSION, NO_GO, CheckReport
    from torchferry.check.runner import Runner
    from torchferry.report import text
    from torchferry.report.core import ensure_writable
    from torchferry.workloads.protocol import resolve_source

    started = time.monotonic()
    cfg = config_from(args)
    resolve_source(cfg["workload"])
    for name in (cfg["ref"], cfg["target"]):
        check_device_name(name)
    outdir = Path(args.output)
    ensure_writable(outdir)
    report = CheckReport(
        meta={"format": "torchferry.check", "format_version": FORMAT_VERSION, "torchferry": __version__,
              "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
        environment=environment(cfg), config=cfg,
    )
    progress = (lambda msg: None) if args.quiet else (lambda msg: env.err(f"ferry check: {msg}"))
    if cfg["target_reason"] != "chosen with --target":
        progress(f"target {cfg['target']}: {cfg['target_reason']}")
    error: BaseException | None = None
    try:
        Runner(report, outdir / "work", progress).run()
    except (FerryError, KeyboardInterrupt) as exc:
        error = exc
        status = getattr(exc, "exit_status", ExitStatus.INTERRUPTED)
        report.failure = {"kind": type(exc).__name__, "message": str(exc) or "interrupted", "exit_status": int(status)}
    verdict.decide(report)
    report.meta["wall_s"] = time.monotonic() - started
    paths = write_reports(report, outdir)
    env.out(text.render(report, paths).rstrip())
    if error is not None:
        raise error
    return ExitStatus.NEGATIVE_RESULT if report.verdict == NO_GO else ExitStatus.SUCCESS
