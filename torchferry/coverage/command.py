"""`ferry coverage`: what share of model architectures run unmodified on a device, suite by suite
(causal-lm, seq2seq, encoder, vision, diffusers), and what each would fall back to on the target.

    ferry coverage                               # every causal-LM architecture, all modes, default target
    ferry coverage --suite all --jobs 2          # every suite
    ferry coverage llama gpt2 my/config.json --modes forward --jobs 2
    ferry coverage --baseline                    # gate on torchferry/coverage/baselines/<suite>/<device>.json
    ferry coverage --plugin my_arch.py my-arch   # a custom architecture registered with AutoConfig/AutoModel
    ferry coverage --shard 2/8 -o shard-2        # the 2nd of 8 cost-balanced parts (one per machine)
    ferry coverage merge shard-*/ -o all         # the shards' stores as one report

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
from torchferry.coverage.job import DEFAULT_MEMORY_GIB
from torchferry.env import Environment
from torchferry.errors import UsageError
from torchferry.harness import options
from torchferry.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archs", nargs="*", metavar="MODEL",
                        help="model types (llama, gpt2, ...), config.json files or folders holding one, or Hub ids "
                             "(org/name[@revision]: only the config is fetched) (default: every causal-LM architecture "
                             "of the installed transformers)")
    parser.add_argument("--configs", metavar="DIR",
                        help="a folder of models, one row each: config files at its top, named by the file "
                             "(<org>_<name>_config.json also gives the model id, e.g. the vendor's "
                             "tests/huggingface/configs/huggingface/CausalLM), model folders holding a config.json, or "
                             "a Hub cache (models--org--name/...); other JSON files are skipped and named")
    parser.add_argument("--suite", default="causal-lm", metavar="NAME[,NAME...]|all",
                        help="model families: causal-lm, seq2seq, encoder, vision, diffusers; several comma-separated, "
                             "or all (default: causal-lm)")
    parser.add_argument("--method", default="torchferry", choices=("torchferry", "torchneuron"),
                        help="torchferry: tiny widths, every mode (default); torchneuron: what AWS torch-neuronx's own "
                             "sweep does (2 layers at the config's widths, its dtype and dropout, default attention, one "
                             "forward+backward at 1x1024 tokens)")
    parser.add_argument("--modes",
                        help="comma-separated: forward, generate (greedy, static cache where supported), train; "
                             "ferry check's names (inference, generation, training) also work (default: every mode "
                             "the suite and the method have)")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="a Python file that registers custom architectures (imported in worker processes only)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="architectures run in parallel (default: 1)")
    parser.add_argument("--memory-gb", type=float, default=DEFAULT_MEMORY_GIB,
                        help=f"address-space limit per worker process in GiB (default: {DEFAULT_MEMORY_GIB:g})")
    parser.add_argument("--restart", action="store_true", help="discard the stored rows instead of resuming")
    parser.add_argument("--repair", action="store_true",
                        help="drop the store's corrupt lines (named when a run refuses it) and keep its good rows")
    parser.add_argument("--rerun", metavar="CATEGORIES", default="",
                        help="comma-separated categories whose stored rows run again (e.g. error,timeout)")
    parser.add_argument("--baseline", nargs="?", const="auto", metavar="FILE",
                        help="compare with expected categories (default file: baselines/<suite>/<device>.json shipped with "
                             "torchferry); exit 3 on a regression")
    parser.add_argument("--write-baseline", metavar="FILE", help="write this run's categories as a baseline file")
    parser.add_argument("--shard", metavar="K/N",
                        help="run the K-th (1-based) of N cost-balanced parts of the selection, the same split on every "
                             "machine; combine the stores with `ferry coverage merge STORE...`")
    options.add_arguments(parser, "coverage")
    parser.epilog = ("`ferry coverage merge STORE...` (folders or rows.jsonl files of --shard runs) writes one report to "
                     "--output; stores measured with other settings or in another environment are refused.")


# the built-in device's knobs that change results: stores measured under different values are not mixed
RESULT_KNOBS = ("TORCHFERRY_PROFILE", "TORCHFERRY_NUMERICS", "TORCHFERRY_FALLBACK", "TORCHFERRY_DEVICE_MEMORY")


def versions() -> dict:
    out = {"torchferry": __version__, "python": platform.python_version()}
    for package in ("torch", "transformers", "torch-neuronx"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def environment() -> dict:
    """What the rows were measured with, besides the settings: versions and the result-changing knobs."""
    import os

    return {"versions": versions(), "knobs": {k: os.environ[k] for k in RESULT_KNOBS if k in os.environ}}


def _costs(cfg) -> dict[str, float]:  # noqa: ANN001 - a CoverageConfig
    """Seconds per ``suite/arch`` from the shipped baselines of the selected suites (the same on every machine)."""
    from torchferry.coverage.config import baseline_path

    costs: dict[str, float] = {}
    for suite in cfg.suites:
        path = baseline_path(suite, cfg.target, cfg.method)
        if path.is_file():
            costs.update(json.loads(path.read_text()).get("cost_s", {}))
    return costs


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.coverage import shard as sharding
    from torchferry.coverage.config import CoverageConfig
    from torchferry.coverage.store import Store
    from torchferry.coverage.sweep import Sweep
    from torchferry.errors import FerryError, InterruptedRun
    from torchferry.harness.signals import stopped_by
    from torchferry.report.coverage import FORMAT, FORMAT_VERSION
    from torchferry.report.meta import Failure, new_meta

    if args.archs[:1] == ["merge"]:
        return merge(args, env)
    part = sharding.parse(args.shard) if args.shard else None
    cfg = CoverageConfig.build(args, Path.cwd())  # every usage, device and output error is raised here, before any case
    out = Path(cfg.output)
    store = Store(out / "rows.jsonl", {**cfg.settings, "environment": environment()}, restart=cfg.restart,
                  repair=args.repair)
    if store.repaired:
        env.err(f"ferry coverage: {store.repaired}")
    store.forget(set(cfg.rerun))
    selected = cfg.jobs_list()
    jobs = selected
    if part:
        names = {j.name: j for j in selected}
        jobs = [names[n] for n in sharding.select(list(names), _costs(cfg), part)]
    modes = [str(m) for m in cfg.modes]
    wanted = [c for j in jobs for c in j.cases()]
    store.begin({"cases": [c for j in selected for c in j.cases()], "shard": str(part) if part else None,
                 "assigned": wanted, "jobs": cfg.jobs})
    resumed = sum(c in store.rows for c in wanted)
    if cfg.skipped_configs:
        env.err(f"ferry coverage: --configs: skipped {len(cfg.skipped_configs)} file(s) that are not model configs: "
                + "; ".join(cfg.skipped_configs))
    if not args.quiet:
        env.err(f"ferry coverage: {len(jobs)} architectures" + (f" (shard {part} of {len(selected)})" if part else "")
                + f", {len(wanted)} cases on {cfg.target} (ref {cfg.ref}), {cfg.jobs} job(s), {cfg.timeout:g} s per case"
                + (f"; resuming, {resumed} rows stored" if resumed else ""))
    meta = new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", ()))
    started = time.perf_counter()

    def progress(row, done: int, total: int) -> None:  # noqa: ANN001 - a report.coverage.Row
        if not args.quiet:
            name = f"{row.suite}/{row.arch}" if len(cfg.suites) > 1 else row.arch
            env.err(f"[{done}/{total}] {name:<28} {row.mode:<8} {row.category:<14} "
                    f"{row.wall_s:6.1f} s  {row.reason[:90]}")

    sweep = Sweep(store, out / "work", cfg.timeout, cfg.jobs, progress, reuse=cfg.reuse_workers)
    error: BaseException | None = None
    failure = None
    try:
        sweep.run(jobs)
    except BaseException as exc:  # Ctrl-C or a bug: stop every worker, keep and report the finished rows
        sweep.stop()
        error = exc
        if isinstance(exc, KeyboardInterrupt):
            failure = Failure(kind=InterruptedRun.slug, message=f"stopped by {stopped_by(exc)}; finished rows kept",
                              exit_status=int(ExitStatus.INTERRUPTED), phase="sweep")
        elif isinstance(exc, FerryError):
            failure = Failure(kind=exc.slug, message=str(exc), exit_status=int(exc.exit_status), phase="sweep")
        else:
            failure = Failure(kind="internal", message=f"{type(exc).__name__}: {exc} (a bug in torchferry)",
                              exit_status=int(ExitStatus.INTERNAL_ERROR), phase="sweep", log=str(out / "work" / "ferry.log"))
            (out / "work").mkdir(parents=True, exist_ok=True)
            (out / "work" / "ferry.log").write_text(traceback.format_exc())
    rows = [store.rows[c] for c in wanted if c in store.rows]
    meta.wall_s = round(time.perf_counter() - started, 1)
    config = {**cfg.to_dict(), "architectures": len(jobs), "shard": str(part) if part else None}
    status = _report(env, out, rows, modes, meta, config,
                     {**environment(), "platform": platform.platform(), "cpus": cfg.threads * cfg.jobs},
                     complete=len(rows) == len(wanted), failure=failure, baseline=cfg.baseline,
                     write_baseline=cfg.write_baseline if error is None else None)
    env.out(f"store: {out / 'rows.jsonl'}")
    if error is not None:
        raise error
    return status


def _report(env: Environment, out: Path, rows: list, modes: list[str], meta, config: dict,  # noqa: ANN001 - Row, Meta
            environ: dict, complete: bool, failure=None, shards: dict | None = None,  # noqa: ANN001 - a Failure
            baseline: tuple[str, dict] | None = None, write_baseline: str | None = None) -> ExitStatus:
    """Summary, headline, baseline marks; coverage.json and coverage.html in ``out``; the terminal table."""
    from torchferry.coverage import results
    from torchferry.report import coverage_render, jsonreport
    from torchferry.report.core import FileReporter, write_atomic, write_reports
    from torchferry.report.coverage import CoverageReport

    rows = results.ordered(rows, modes)
    summary = results.summarise(rows, modes)
    vers = environ["versions"]
    report = CoverageReport(meta=meta, environment=environ, config=config,
                            headline=results.headline(summary, config["target"], config["compile"], vers),
                            summary=summary, rows=rows, complete=complete, failure=failure, shards=shards)
    status = ExitStatus.SUCCESS
    if baseline:
        path, expected = baseline
        report.rows, marks = results.compare_baseline(report.rows, expected)
        report.baseline = {"file": path, **marks}
        if report.baseline["regressed"] and report.complete:
            status = ExitStatus.NEGATIVE_RESULT
    paths = write_reports(report, [FileReporter("coverage.json", jsonreport.render),
                                   FileReporter("coverage.html", coverage_render.render_html)], out)
    if write_baseline:
        write_atomic(Path(write_baseline),
                     json.dumps(results.baseline_from(rows, config["target"], config, vers), indent=1) + "\n")
    env.out(coverage_render.render_text(report))
    env.out(f"reports: {paths[0]}, {paths[1]}")
    return status


def _store_file(given: str) -> Path:
    path = (Path.cwd() / given).resolve()
    path = path / "rows.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise UsageError(f"{given!r} is not a coverage store (no rows.jsonl there). Pass the "
                         "--output folders (or rows.jsonl files) of the `ferry coverage --shard K/N` runs.")
    return path


def merge(args: argparse.Namespace, env: Environment) -> ExitStatus:
    """``ferry coverage merge STORE...``: one report from the stores of ``--shard`` runs.

    The stores must share their settings and environment (the store's first line) and their
    selection (the cases of the whole sweep, from their last ``run`` line); a case may be
    assigned to one store only. Shards that are missing leave the report incomplete, named.
    """
    from torchferry.coverage import methods
    from torchferry.coverage.config import load_baseline
    from torchferry.coverage.store import differences, read
    from torchferry.report.coverage import FORMAT, FORMAT_VERSION
    from torchferry.report.core import ensure_writable
    from torchferry.report.meta import new_meta

    meta = new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", ()))
    started = time.perf_counter()
    options.apply_defaults(args, "coverage")
    paths = list(dict.fromkeys(_store_file(g) for g in args.archs[1:]))
    if not paths:
        raise UsageError("no store to merge given. Pass the --output folders of the --shard runs: "
                         "ferry coverage merge shard-1 shard-2 ... -o merged")
    out = (Path.cwd() / args.output).resolve()
    ensure_writable(out)
    stores = [(p, read(p)) for p in paths]
    for p, found in stores:
        if found.corrupt:
            n, why = found.corrupt[0]
            raise UsageError(f"{str(p)!r} has {len(found.corrupt)} corrupt line(s) (line {n}: {why}). Repair that shard's "
                             "store with its own command line plus --repair (its good rows are kept), then merge again.")
        if found.settings is None or not found.runs:
            raise UsageError(f"{str(p)!r} has no settings or run line (a store from an older "
                             "torchferry, or not a store). Rerun that shard with this torchferry.")
    first_path, first = stores[0]
    first_run = first.runs[-1]
    owner: dict[str, Path] = {}
    for p, found in stores:
        differing = differences(first.settings, found.settings, (f"{first_path.parent}", f"{p.parent}"))
        run = found.runs[-1]
        if set(run["cases"]) != set(first_run["cases"]):
            extra, lacking = set(run["cases"]) - set(first_run["cases"]), set(first_run["cases"]) - set(run["cases"])
            differing.append(f"selection: {len(extra)} cases only in {p.parent.name}/ (e.g. {', '.join(sorted(extra)[:3])}), "
                             f"{len(lacking)} only in {first_path.parent.name}/ (e.g. {', '.join(sorted(lacking)[:3])})")
        if _shard(run)[1] != _shard(first_run)[1]:
            differing.append(f"shard count: {first_path.parent.name}/ {first_run['shard']!r}, {p.parent.name}/ {run['shard']!r}")
        if differing:
            raise UsageError(f"{str(p)!r} was measured with other settings or in another "
                             f"environment than {str(first_path)!r}: {'; '.join(differing)}. Merge only the shards of "
                             "one sweep, run with the same command, versions and TORCHFERRY_* settings.")
        for case in run["assigned"]:
            if case in owner:
                raise UsageError(f"the case {case} belongs to two stores ({str(owner[case])!r} and "
                                 f"{str(p)!r}): they are not disjoint shards of one sweep. Pass each shard once.")
            owner[case] = p
    rows = [found.rows[c] for p, found in stores for c in found.runs[-1]["assigned"] if c in found.rows]
    cases = first_run["cases"]
    count = _shard(first_run)[1]
    merged = sorted(_shard(found.runs[-1])[0] for _, found in stores)
    shards = {"count": count, "merged": merged, "missing": sorted(set(range(1, count + 1)) - set(merged)),
              "stores": [str(p) for p in paths], "unassigned": len(set(cases) - set(owner))}
    modes = [m for m in ("forward", "generate", "train") if any(c.endswith(f"/{m}") for c in cases)]
    settings = {k: v for k, v in first.settings.items() if k != "environment"}
    suites = sorted({c.split("/", 1)[0] for c in cases})
    method = methods.get(settings.get("method") or methods.TORCHFERRY.name, bool(settings.get("trust_remote_code")))
    config = {**settings, "modes": modes, "suites": suites, "architectures": len({c.rsplit("/", 1)[0] for c in cases}),
              "jobs": first_run.get("jobs"), "output": str(out), "shard": None, "method_settings": method.settings()}
    baseline = (load_baseline(args.baseline, settings["target"], Path.cwd(), tuple(suites), method.name)
                if args.baseline else None)
    write_baseline = str((Path.cwd() / args.write_baseline).resolve()) if args.write_baseline else None
    meta.wall_s = round(time.perf_counter() - started, 1)
    return _report(env, out, rows, modes, meta, config, first.settings["environment"], complete=len(rows) == len(cases),
                   shards=shards, baseline=baseline, write_baseline=write_baseline)


def _shard(run: dict) -> tuple[int, int]:
    """(K, N) of a run line; an unsharded run is 1/1."""
    k, n = (run.get("shard") or "1/1").split("/")
    return int(k), int(n)
