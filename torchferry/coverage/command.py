"""`ferry coverage`: what share of transformers' causal-LM architectures run unmodified on a device.

    ferry coverage                               # every causal-LM architecture, all modes, default target
    ferry coverage llama gpt2 my/config.json --modes forward --jobs 2
    ferry coverage --baseline                    # gate on torchferry/coverage/baselines/<device>.json
    ferry coverage --plugin my_arch.py my-arch   # a custom architecture registered with AutoConfig/AutoModel

Light at import: torch is imported only by the worker processes.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from importlib import metadata
from pathlib import Path

from torchferry import __version__
from torchferry.env import Environment
from torchferry.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archs", nargs="*", metavar="ARCH",
                        help="model types (llama, gpt2, ...) or config.json files (default: every causal-LM "
                             "architecture of the installed transformers)")
    parser.add_argument("--modes", default="forward,generate,train",
                        help="comma-separated: forward, generate (greedy, static cache where supported), train; "
                             "ferry check's names (inference, generation, training) also work (default: all three)")
    parser.add_argument("--ref", default="cpu", help="reference device (default: cpu)")
    parser.add_argument("--target", help="device to measure (default: as `ferry check`)")
    parser.add_argument("--compile", metavar="BACKEND", help="torch.compile the target with this backend")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="a Python file that registers custom architectures (imported in worker processes only)")
    parser.add_argument("--tol", type=float, help="parity tolerance (default: per mode, docs/check/parity.md)")
    parser.add_argument("--seed", type=int, default=1337, help="seed of weights and inputs (default: 1337)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="architectures run in parallel (default: 1)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case (default: 300)")
    parser.add_argument("--memory-gb", type=float, default=12,
                        help="address-space limit per worker process in GiB (default: 12)")
    parser.add_argument("-o", "--output", default="ferry-coverage",
                        help="folder of the store (rows.jsonl) and reports (default: ./ferry-coverage)")
    parser.add_argument("--restart", action="store_true", help="discard the stored rows instead of resuming")
    parser.add_argument("--rerun", metavar="CATEGORIES", default="",
                        help="comma-separated categories whose stored rows run again (e.g. error,timeout)")
    parser.add_argument("--baseline", nargs="?", const="auto", metavar="FILE",
                        help="compare with expected categories (default file: baselines/<device>.json shipped with "
                             "torchferry); exit 3 on a regression")
    parser.add_argument("--write-baseline", metavar="FILE", help="write this run's categories as a baseline file")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def versions() -> dict:
    out = {"torchferry": __version__, "python": platform.python_version()}
    for package in ("torch", "transformers", "torch-neuronx"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.coverage import results
    from torchferry.coverage.config import CoverageConfig
    from torchferry.coverage.store import Store
    from torchferry.coverage.sweep import Sweep
    from torchferry.errors import FerryError, InterruptedRun
    from torchferry.report import coverage_render, jsonreport
    from torchferry.report.core import FileReporter, write_atomic, write_reports
    from torchferry.report.coverage import FORMAT, FORMAT_VERSION, CoverageReport
    from torchferry.report.meta import Failure, new_meta

    cfg = CoverageConfig.build(args, Path.cwd())  # every usage, device and output error is raised here, before any case
    out = Path(cfg.output)
    store = Store(out / "rows.jsonl", cfg.settings, restart=cfg.restart)
    store.forget(set(cfg.rerun))
    jobs = cfg.jobs_list()
    modes = [str(m) for m in cfg.modes]
    resumed = sum(store.done(j["arch"], m) for j in jobs for m in modes)
    if not args.quiet:
        env.err(f"ferry coverage: {len(cfg.archs)} architectures x {len(modes)} modes on {cfg.target} (ref {cfg.ref}), "
                f"{cfg.jobs} job(s), {cfg.timeout:g} s per case" + (f"; resuming, {resumed} rows stored" if resumed else ""))
    meta = new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", ()))
    started = time.perf_counter()

    def progress(row, done: int, total: int) -> None:  # noqa: ANN001 - a report.coverage.Row
        if not args.quiet:
            env.err(f"[{done}/{total}] {row.arch:<28} {row.mode:<8} {row.category:<14} "
                    f"{row.wall_s:6.1f} s  {row.reason[:90]}")

    sweep = Sweep(store, out / "work", cfg.timeout, cfg.jobs, progress)
    error: BaseException | None = None
    failure = None
    try:
        sweep.run(jobs)
    except BaseException as exc:  # Ctrl-C or a bug: stop every worker, keep and report the finished rows
        sweep.stop()
        error = exc
        if isinstance(exc, KeyboardInterrupt):
            failure = Failure(kind=InterruptedRun.slug, message="stopped with Ctrl-C; finished rows kept",
                              exit_status=int(ExitStatus.INTERRUPTED), phase="sweep")
        elif isinstance(exc, FerryError):
            failure = Failure(kind=exc.slug, message=str(exc), exit_status=int(exc.exit_status), phase="sweep")
        else:
            failure = Failure(kind="internal", message=f"{type(exc).__name__}: {exc} (a bug in torchferry)",
                              exit_status=int(ExitStatus.INTERNAL_ERROR), phase="sweep", log=str(out / "work" / "ferry.log"))
            (out / "work").mkdir(parents=True, exist_ok=True)
            (out / "work" / "ferry.log").write_text(traceback.format_exc())
    wanted = {(j["arch"], m) for j in jobs for m in modes}
    rows = sorted((r for r in store.rows.values() if (r.arch, r.mode) in wanted), key=lambda r: (r.arch, modes.index(r.mode)))
    vers = versions()
    summary = results.summarise(rows, modes)
    meta.wall_s = round(time.perf_counter() - started, 1)
    report = CoverageReport(
        meta=meta, environment={"versions": vers, "platform": platform.platform(), "cpus": cfg.threads * cfg.jobs},
        config={**cfg.to_dict(), "architectures": len(cfg.archs)}, headline=results.headline(summary, cfg.target, cfg.compile, vers),
        summary=summary, rows=rows, complete=len(rows) == len(wanted), failure=failure)
    status = ExitStatus.SUCCESS
    if cfg.baseline:
        path, expected = cfg.baseline
        report.baseline = {"file": path, **results.compare_baseline(rows, expected)}
        if report.baseline["regressed"] and report.complete:
            status = ExitStatus.NEGATIVE_RESULT
    paths = write_reports(report, [FileReporter("coverage.json", jsonreport.render),
                                   FileReporter("coverage.html", coverage_render.render_html)], out)
    if cfg.write_baseline and error is None:
        write_atomic(Path(cfg.write_baseline),
                     json.dumps(results.baseline_from(rows, cfg.target, report.config, vers), indent=1) + "\n")
    env.out(coverage_render.render_text(report))
    env.out(f"reports: {paths[0]}, {paths[1]}; store: {out / 'rows.jsonl'}")
    if error is not None:
        raise error
    return status
