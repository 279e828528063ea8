"""The one typed configuration of `ferry coverage`, built and validated once, before any case runs.

Modes (one set of names, torchferry.harness.modes), numbers, devices, architectures, the
baseline file, ``--write-baseline``, ``--rerun`` categories and the output folder are all
checked here. Plugin files are imported only in worker processes: their architectures are
validated with one listing worker (``python -m torchferry.coverage.worker --list-archs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from torchferry.errors import UsageError
from torchferry.harness.modes import Mode, parse_mode
from torchferry.report.coverage import Category

BASELINES = Path(__file__).parent / "baselines"
LIST_TIMEOUT_S = 180.0


@dataclass(frozen=True, kw_only=True)
class CoverageConfig:
    archs: tuple[str, ...]  # model types or config.json paths (absolute)
    source: str  # "user list" or where the full list came from
    modes: tuple[Mode, ...]
    ref: str
    target: str
    compile: str | None
    plugins: tuple[str, ...]  # absolute paths
    tol: float | None
    seed: int
    jobs: int
    threads: int  # torch threads per worker: no oversubscription across parallel workers
    timeout: float
    memory_gb: float
    output: str  # absolute
    restart: bool
    rerun: frozenset[Category]
    baseline: tuple[str, dict] | None  # (file, expected rows)
    write_baseline: str | None

    @property
    def settings(self) -> dict:
        """What makes stored rows comparable: the store's first line."""
        return {"ref": self.ref, "target": self.target, "compile": self.compile, "tol": self.tol, "seed": self.seed,
                "plugins": list(self.plugins)}

    def jobs_list(self) -> list[dict]:
        return [{"arch": Path(a).stem if a.endswith(".json") else a, "spec": a, "modes": [str(m) for m in self.modes],
                 **self.settings, "threads": self.threads, "memory_gib": self.memory_gb} for a in self.archs]

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data.update(modes=[str(m) for m in self.modes], rerun=sorted(map(str, self.rerun)), archs=len(self.archs),
                    baseline=self.baseline[0] if self.baseline else None)
        return data

    @classmethod
    def build(cls, args: argparse.Namespace, cwd: Path) -> CoverageConfig:
        from torchferry.harness import devices
        from torchferry.report.core import ensure_writable

        modes = _modes(args.modes)
        if args.jobs < 1 or args.timeout <= 0 or args.memory_gb <= 0:
            raise UsageError(f"--jobs must be at least 1, --timeout and --memory-gb positive "
                             f"(got {args.jobs}, {args.timeout:g}, {args.memory_gb:g}).")
        target = args.target or devices.default_target()[0]
        for name in (args.ref, target):
            devices.check_usable(name)
        plugins = tuple(str((cwd / p).resolve()) for p in args.plugin)
        for given, path in zip(args.plugin, plugins):
            if not Path(path).is_file():
                raise UsageError(f"--plugin {given!r}: no such file. Pass a Python file that registers architectures.")
        archs = tuple(str((cwd / a).resolve()) if a.endswith(".json") else a for a in dict.fromkeys(args.archs))
        _check_archs(args.archs, archs, plugins)
        rerun = {c.strip() for c in args.rerun.split(",") if c.strip()}
        if rerun - set(map(str, Category)):
            raise UsageError(f"--rerun {args.rerun!r}: unknown categories; valid: {', '.join(map(str, Category))}.")
        output = (cwd / args.output).resolve()
        ensure_writable(output)
        write_baseline = str((cwd / args.write_baseline).resolve()) if args.write_baseline else None
        if write_baseline:
            ensure_writable(Path(write_baseline).parent)
        if not archs:
            from torchferry.coverage import configs

            archs = tuple(sorted(configs.causal_lm_architectures()))
        return cls(archs=archs, source="user list" if args.archs else "transformers MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                   modes=modes, ref=args.ref, target=target, compile=args.compile, plugins=plugins, tol=args.tol,
                   seed=args.seed, jobs=args.jobs, threads=max(1, len(os.sched_getaffinity(0)) // args.jobs),
                   timeout=float(args.timeout), memory_gb=float(args.memory_gb), output=str(output), restart=args.restart,
                   rerun=frozenset(Category(c) for c in rerun),
                   baseline=load_baseline(args.baseline, target, cwd) if args.baseline else None,
                   write_baseline=write_baseline)


def _modes(text: str) -> tuple[Mode, ...]:
    modes = {parse_mode(m) for m in text.split(",") if m.strip()}
    if not modes:
        raise UsageError(f"--modes {text!r}: no mode given; valid: {', '.join(m.value for m in Mode)}.")
    return tuple(m for m in (Mode.FORWARD, Mode.GENERATE, Mode.TRAIN) if m in modes)


def _known_types(plugins: tuple[str, ...]) -> set[str]:
    """transformers' model types, with the plugins' ones asked of a worker (plugin code never runs here)."""
    if not plugins:
        from transformers import CONFIG_MAPPING

        return set(CONFIG_MAPPING.keys())
    import tempfile

    from torchferry.errors import from_kind
    from torchferry.harness.protocol import WorkerProcess, python_module

    with tempfile.TemporaryDirectory(prefix="ferry-coverage-list-") as tmp:
        proc = WorkerProcess("architecture list", python_module("torchferry.coverage.worker", "--list-archs", *plugins),
                             Path(tmp) / "list.log")
        try:
            event = proc.wait("result", timeout=LIST_TIMEOUT_S, phase="importing the plugins")
        finally:
            proc.close(grace=5)
        if event["event"] == "error":
            raise from_kind(event["kind"], f"a --plugin file failed to import: {event['type']}: {event['message']}",
                            event.get("traceback"))
        if event["event"] != "result":
            raise UsageError(f"importing the --plugin files killed the worker: {event.get('message')}")
        return set(event["data"])


def _check_archs(given: list[str], archs: tuple[str, ...], plugins: tuple[str, ...]) -> None:
    import difflib

    for name, path in zip(dict.fromkeys(given), archs):
        if name.endswith(".json") and not Path(path).is_file():
            raise UsageError(f"config file {name!r} does not exist. Pass a config.json or a model type.")
    types = [a for a in archs if not a.endswith(".json")]
    if not types:
        return
    known = _known_types(plugins)
    for name in types:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise UsageError(f"unknown architecture {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                             + " Pass a transformers model type, a config.json, or register it with --plugin.")


def load_baseline(spec: str, device: str, cwd: Path) -> tuple[str, dict]:
    path = BASELINES / f"{device.split(':')[0]}.json" if spec == "auto" else (cwd / spec).resolve()
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in BASELINES.glob("*.json"))) or "none"
        raise UsageError(f"baseline {str(path)!r} does not exist (shipped baselines: {shipped}). Write one with "
                         "--write-baseline FILE, or pass --baseline FILE.")
    try:
        return str(path), json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"baseline {str(path)!r} is not valid JSON ({exc}). Regenerate it with --write-baseline.") from exc
