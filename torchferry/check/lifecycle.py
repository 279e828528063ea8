"""The life of one `ferry check` run, the same for every source: lock, log, run, failure, verdict, reports.

A pipeline (the worker pipeline of a build() workload or a named model, check/runner.py; the
script pipeline, check/script/runner.py) fills the one result model as results arrive. Around it,
this module does what every run needs, once:

- one writer per output folder (torchferry.harness.outlock), and a note when a dead run's lock
  was taken over;
- the run's log (``work/ferry.log``): every progress line, and the traceback of a bug;
- whatever ends the run (an error, a timeout, Ctrl-C or SIGTERM, a full disk, a bug), the
  pipeline's children are stopped and what they measured stays in the report, with the failure
  in the report's words (an error slug, the phase, the log);
- the verdict (check/verdict.py), then ``report.json`` and ``report.html``, each written
  atomically and on its own: on a full disk this run's scratch files are removed to make room,
  and the terminal summary is printed even when no file could be written;
- the exit status from the documented set (torchferry.status).
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from torchferry import __version__
from torchferry.check import verdict
from torchferry.check.config import CheckConfig
from torchferry.env import Environment
from torchferry.errors import FerryError, InterruptedRun, OutputError, disk_full
from torchferry.harness.outlock import output_lock
from torchferry.report.check import FORMAT, FORMAT_VERSION, NO_GO, CheckReport
from torchferry.report.meta import Failure, new_meta
from torchferry.status import ExitStatus

LOG_NAME = "ferry.log"  # under the run's work folder


class Pipeline(Protocol):
    """What the lifecycle asks of a source's pipeline."""

    phase: str  # what is in progress, named in a failure

    def run(self) -> None:
        """Run every phase, filling the report as results arrive; raise a FerryError when the run cannot go on."""

    def stop(self) -> None:
        """Stop every child now (the run is ending) and keep in the report what they recorded."""

    def scratch(self) -> list[Path]:
        """This run's scratch files and folders, spent once the children are stopped."""


Note = Callable[[str], None]
PipelineFactory = Callable[[CheckReport, CheckConfig, Note], Pipeline]


class Progress:
    """The run's progress lines: into the report, the run's log and (unless quiet) stderr."""

    def __init__(self, report: CheckReport, log: Path, env: Environment, quiet: bool) -> None:
        self.report, self.log, self.env, self.quiet = report, log, env, quiet

    def __call__(self, message: str) -> None:
        self.report.progress.append(message)
        try:
            with open(self.log, "a") as f:
                f.write(message + "\n")
        except OSError:
            pass  # a full disk: the line is still in the report's progress and on stderr
        if not self.quiet:
            self.env.err(f"ferry check: {message}")


def run(cfg: CheckConfig, env: Environment, argv: list[str], quiet: bool, pipeline: PipelineFactory) -> ExitStatus:
    """Run ``pipeline`` under the output folder's lock and report it; raises the error that ended the run."""
    meta = new_meta(FORMAT, FORMAT_VERSION, argv)
    with output_lock(Path(cfg.output), meta.command) as took_over:  # one writer per output folder
        return _run_locked(cfg, env, quiet, pipeline, meta, took_over)


def _run_locked(cfg: CheckConfig, env: Environment, quiet: bool, factory: PipelineFactory, meta,  # noqa: ANN001
                took_over: str | None) -> ExitStatus:
    started = time.monotonic()
    report = CheckReport(meta=meta, environment=environment(cfg), config=cfg.to_dict(), subject=cfg.subject())
    log = cfg.workdir / LOG_NAME
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    note = Progress(report, log, env, quiet)
    if took_over:
        note(took_over)
    if cfg.target_reason != "chosen with --target":
        note(f"target {cfg.target}: {cfg.target_reason}")
    pipeline = factory(report, cfg, note)
    error: BaseException | None = None
    try:
        pipeline.run()
    except BaseException as exc:  # whatever stops the run, the report keeps what was measured and says why
        error = exc
        if not isinstance(exc, (FerryError, KeyboardInterrupt)) and disk_full(exc):  # this process could not write
            error = OutputError(f"the disk holding {cfg.workdir} is full ({exc}). Free space there, or pass an --output "
                                "DIR on a disk with room.")
            error.__cause__ = exc
        pipeline.stop()
        report.failure = failure_of(error, pipeline.phase, log)
        if report.failure.kind == "internal":
            with contextlib.suppress(OSError), open(log, "a") as f:
                f.write(traceback.format_exc())
    verdict.decide(report)
    report.meta.wall_s = time.monotonic() - started
    outdir = Path(cfg.output)
    paths, unwritten = write_each(report, outdir)
    if any(disk_full(exc, outdir) for _, exc in unwritten):  # make room: this run's scratch files are spent
        report.progress.append(f"the disk holding {outdir} is full: removed this run's scratch files to make room for "
                               f"the report ({remove(pipeline.scratch(), outdir)})")
        paths, unwritten = write_each(report, outdir)
    from torchferry.report import text

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


def environment(cfg: CheckConfig) -> dict:
    """The report's environment block: versions, host, the devices compared and the seeds."""
    import importlib.metadata as md

    import torch

    def version(package: str) -> str | None:
        try:
            return md.version(package)
        except md.PackageNotFoundError:
            return None

    seeds = {"start": cfg.seed}
    if cfg.workload is not None:
        seeds.update(weights_and_batches=cfg.seed, eval_batch=cfg.workload.eval_seed)
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
        "torch": torch.__version__, "transformers": version("transformers"), "safetensors": version("safetensors"),
        "torchferry": __version__, "cpu_threads": torch.get_num_threads(),
        "devices": {"ref": cfg.ref, "target": cfg.target, "target_reason": cfg.target_reason}, "seeds": seeds,
    }


def failure_of(exc: BaseException, phase: str, log: Path) -> Failure:
    """What stopped the run, in the report's words: an error slug, ``interrupted`` (naming the signal), or
    ``internal`` for a bug."""
    from torchferry.harness.signals import stopped_by

    if isinstance(exc, FerryError):
        kind, status, text = exc.slug, exc.exit_status, str(exc) or type(exc).__name__
    elif isinstance(exc, KeyboardInterrupt):
        kind, status = InterruptedRun.slug, ExitStatus.INTERRUPTED
        text = f"stopped by {stopped_by(exc)}; the children were stopped and what they measured is kept"
    else:
        kind, status = "internal", ExitStatus.INTERNAL_ERROR
        text = f"{type(exc).__name__}: {exc} (a bug in torchferry)"
    return Failure(kind=kind, message=text, exit_status=int(status), phase=phase, log=str(log),
                   traceback=getattr(exc, "user_traceback", None))


def write_each(report: CheckReport, outdir: Path) -> tuple[list[Path], list[tuple[str, OSError]]]:
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


def remove(paths: list[Path], outdir: Path) -> str:
    """Remove spent scratch files and folders; says what was removed."""
    removed = [p for p in paths if p.exists()]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return ", ".join(str(p.relative_to(outdir)) if p.is_relative_to(outdir) else str(p) for p in removed) \
        or "nothing to remove"
