"""`ferry coverage`: what share of transformers' causal-LM architectures run unmodified on a device.

    ferry coverage                               # every causal-LM architecture, all modes, default target
    ferry coverage llama gpt2 my/config.json --modes forward --jobs 2
    ferry coverage --baseline                    # gate on torchferry/coverage/baselines/<device>.json
    ferry coverage --plugin my_arch.py my-arch   # a custom architecture registered with AutoConfig/AutoModel

Light at import: torch is imported only by the worker processes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from torchferry import __version__
from torchferry.env import Environment
from torchferry.errors import UsageError
from torchferry.status import ExitStatus

BASELINES = Path(__file__).parent / "baselines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archs", nargs="*", metavar="ARCH",
                        help="model types (llama, gpt2, ...) or config.json files (default: every causal-LM "
                             "architecture of the installed transformers)")
    parser.add_argument("--modes", default="forward,generate,train",
                        help="comma-separated: forward, generate (greedy, static cache where supported), train "
                             "(default: all three)")
    parser.add_argument("--ref", default="cpu", help="reference device (default: cpu)")
    parser.add_argument("--target", help="device to measure (default: as `ferry check`)")
    parser.add_argument("--compile", metavar="BACKEND", help="torch.compile the target with this backend")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="a Python file that registers custom architectures (imported in every worker)")
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


def _modes(text: str) -> list[str]:
    from torchferry.coverage.results import MODES

    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UsageError(f"--modes {text!r}: unknown mode(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(MODES)}.")
    return [m for m in MODES if m in modes]


def _architectures(args: argparse.Namespace) -> list[str]:
    """The requested architectures, checked before any process starts."""
    import difflib

    from transformers import CONFIG_MAPPING

    from torchferry.coverage import configs
    from torchferry.coverage.worker import _import_plugin

    for plugin in args.plugin:
        if not Path(plugin).is_file():
            raise UsageError(f"--plugin {plugin!r}: no such file. Pass a Python file that registers architectures.")
        _import_plugin(plugin)
    if not args.archs:
        return sorted(configs.causal_lm_architectures())
    known = set(CONFIG_MAPPING.keys())
    for name in args.archs:
        if name.endswith(".json"):
            if not Path(name).is_file():
                raise UsageError(f"config file {name!r} does not exist. Pass a config.json or a model type.")
        elif name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise UsageError(f"unknown architecture {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                             + " Pass a transformers model type, a config.json, or register it with --plugin.")
    return list(dict.fromkeys(args.archs))


def versions() -> dict:
    out = {"torchferry": __version__, "python": platform.python_version()}
    for package in ("torch", "transformers", "torch-neuronx"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def load_baseline(spec: str, device: str) -> tuple[Path, dict]:
    path = BASELINES / f"{device.split(':')[0]}.json" if spec == "auto" else Path(spec)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in BASELINES.glob("*.json"))) or "none"
        raise UsageError(f"baseline {str(path)!r} does not exist (shipped baselines: {shipped}). Write one with "
                         "--write-baseline FILE, or pass --baseline FILE.")
    try:
        return path, json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"baseline {str(path)!r} is not valid JSON ({exc}). Regenerate it with --write-baseline.") from exc


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.check import devices
    from torchferry.coverage import report, results
    from torchferry.coverage.store import Store
    from torchferry.coverage.sweep import sweep
    from torchferry.report.core import ensure_writable, write_atomic

    modes = _modes(args.modes)
    if args.jobs < 1 or args.timeout <= 0:
        raise UsageError(f"--jobs must be at least 1 and --timeout positive (got {args.jobs}, {args.timeout}).")
    target = args.target or devices.default_target()[0]
    archs = _architectures(args)
    out = Path(args.output)
    ensure_writable(out)
    baseline = load_baseline(args.baseline, target) if args.baseline else None
    settings = {"ref": args.ref, "target": target, "compile": args.compile, "tol": args.tol, "seed": args.seed,
                "plugins": [str(Path(p).resolve()) for p in args.plugin]}
    rerun = {c.strip() for c in args.rerun.split(",") if c.strip()}
    if rerun - set(results.CATEGORIES):
        raise UsageError(f"--rerun {args.rerun!r}: unknown categories; valid: {', '.join(results.CATEGORIES)}.")
    store = Store(out / "rows.jsonl", settings, restart=args.restart)
    store.forget(rerun)
    threads = max(1, len(os.sched_getaffinity(0)) // args.jobs)  # no oversubscription across parallel workers
    jobs = [{"arch": Path(a).stem if a.endswith(".json") else a, "spec": a, "modes": modes, **settings,
             "threads": threads, "memory_gib": args.memory_gb} for a in archs]
    resumed = sum(store.done(j["arch"], m) for j in jobs for m in modes)
    if not args.quiet:
        env.err(f"ferry coverage: {len(archs)} architectures x {len(modes)} modes on {target} (ref {args.ref}), "
                f"{args.jobs} job(s), {args.timeout:g} s per case" + (f"; resuming, {resumed} rows stored" if resumed else ""))
    started = time.perf_counter()

    def progress(row: dict, done: int, total: int) -> None:
        if not args.quiet:
            env.err(f"[{done}/{total}] {row['arch']:<28} {row['mode']:<8} {row['category']:<14} "
                    f"{row.get('wall_s', 0):6.1f} s  {row['reason'][:90]}")

    sweep(jobs, store, out / "work", args.timeout, args.jobs, progress)
    wanted = {(j["arch"], m) for j in jobs for m in modes}
    rows = [r for r in store.rows.values() if (r["arch"], r["mode"]) in wanted]
    vers = versions()
    summary = results.summarise(rows, modes)
    doc = {
        "meta": {"format_version": results.FORMAT_VERSION, "tool": f"torchferry {__version__}",
                 "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "command": "ferry coverage " + " ".join(sys.argv[1:] if sys.argv[0].endswith("ferry") else [])},
        "environment": {"versions": vers, "platform": platform.platform(), "cpus": threads * args.jobs},
        "config": {**settings, "modes": modes, "jobs": args.jobs, "timeout_s": args.timeout, "memory_gb": args.memory_gb,
                   "architectures": len(archs), "source": "user list" if args.archs else
                   "transformers MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"},
        "headline": results.headline(summary, target, args.compile, vers),
        "summary": summary,
        "wall_s": round(time.perf_counter() - started, 1),
        "rows": sorted(rows, key=lambda r: (r["arch"], modes.index(r["mode"]))),
    }
    status = ExitStatus.SUCCESS
    if baseline:
        path, expected = baseline
        doc["baseline"] = {"file": str(path), **results.compare_baseline(doc["rows"], expected)}
        if doc["baseline"]["regressed"]:
            status = ExitStatus.NEGATIVE_RESULT
    write_atomic(out / "coverage.json", report.render_json(doc))
    write_atomic(out / "coverage.html", report.render_html(doc))
    if args.write_baseline:
        write_atomic(Path(args.write_baseline),
                     json.dumps(results.baseline_from(rows, target, doc["config"], vers), indent=1) + "\n")
    env.out(report.render_text(doc))
    env.out(f"reports: {out / 'coverage.json'}, {out / 'coverage.html'}; store: {out / 'rows.jsonl'}")
    return status
