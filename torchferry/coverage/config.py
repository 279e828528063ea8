"""The one typed configuration of `ferry coverage`, built and validated once, before any case runs.

Suites (torchferry.coverage.suites) and the method (torchferry.coverage.methods), modes (one
set of names, torchferry.harness.modes), numbers, devices, architectures, the baseline file,
``--write-baseline``, ``--rerun`` categories and the output folder are all checked here.
Each suite runs the requested modes it has (its own by default); an architecture is named
within its suite, so one sweep may hold ``bart`` of ``causal-lm`` and of ``seq2seq``. Plugin files are imported only in worker processes: their architectures are
validated with one listing worker (``python -m torchferry.coverage.worker --list-archs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.coverage.job import CoverageJob
from torchferry.errors import UsageError
from torchferry.harness import bounds, options
from torchferry.harness.modes import Mode, parse_mode
from torchferry.report.coverage import Category

BASELINES = Path(__file__).parent / "baselines"
REUSE_ENV = "TORCHFERRY_COVERAGE_REUSE"  # 0: a fresh worker process per architecture (torchferry.coverage.sweep)
LIST_TIMEOUT_S = 180.0


@dataclass(frozen=True, kw_only=True)
class CoverageConfig:
    suites: tuple[str, ...]  # torchferry.coverage.suites names, in sweep order
    method: str  # torchferry.coverage.methods name
    archs: tuple[tuple[str, str], ...]  # (suite, model type / architecture name / config.json path (absolute) / Hub id)
    names: dict[str, tuple[str, str | None]]  # spec -> (row name, model id) where the spec is not the name itself
    skipped_configs: tuple[str, ...]  # --configs files that are not model configs: "path (why)"
    trust_remote_code: bool
    source: str  # "user list" or where the full lists came from
    modes: tuple[Mode, ...]  # every mode requested; each suite runs those it has (suite_modes)
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
    reuse_workers: bool  # a worker takes its slot's next architecture after rows that ended normally
    output: str  # absolute
    restart: bool
    rerun: frozenset[Category]
    baseline: tuple[str, dict] | None  # (file, expected rows)
    write_baseline: str | None

    @property
    def suite(self) -> str:
        """The suites as ``--suite`` takes them (one name, or a comma-separated list)."""
        return ",".join(self.suites)

    @property
    def settings(self) -> dict:
        """What makes stored rows comparable: the store's first line."""
        return {"ref": self.ref, "target": self.target, "compile": self.compile, "tol": self.tol, "seed": self.seed,
                "plugins": list(self.plugins), "method": self.method, "trust_remote_code": self.trust_remote_code}

    def suite_modes(self, suite: str) -> list[str]:
        """The requested modes that ``suite`` has (and the method runs)."""
        from torchferry.coverage import suites

        have = suites.get(suite).modes
        return [str(m) for m in self.modes if m in have]

    def jobs_list(self) -> list[CoverageJob]:
        """One job per (suite, architecture), in sweep order, each with the modes its suite has."""
        modes = {s: tuple(self.suite_modes(s)) for s in self.suites}
        return [CoverageJob(arch=self.names.get(a, (a,))[0], model_id=self.names.get(a, (a, None))[1], spec=a, suite=s,
                            modes=modes[s], ref=self.ref, target=self.target, compile=self.compile, tol=self.tol,
                            seed=self.seed, plugins=self.plugins, method=self.method,
                            trust_remote_code=self.trust_remote_code, threads=self.threads, memory_gib=self.memory_gb)
                for s, a in self.archs]

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data.update(modes=[str(m) for m in self.modes], rerun=sorted(map(str, self.rerun)), archs=len(self.archs),
                    suites=list(self.suites), baseline=self.baseline[0] if self.baseline else None,
                    method_settings=_method(self.method, self.trust_remote_code).settings())
        data.pop("names")
        return data

    @classmethod
    def build(cls, args: argparse.Namespace, cwd: Path) -> CoverageConfig:
        from torchferry.harness import devices
        from torchferry.report.core import ensure_writable

        from torchferry.coverage import methods, suites

        names = suites.parse(getattr(args, "suite", None) or suites.DEFAULT)
        method = methods.get(getattr(args, "method", None) or methods.TORCHFERRY.name)
        if method.suites is not None and set(names) - set(method.suites):
            raise UsageError(f"--method {method.name} applies to the {', '.join(method.suites)} suite only (it is the "
                             f"vendor's own sweep); got --suite {','.join(names)}.")
        modes = _modes(args.modes, [suites.get(n) for n in names], method)
        options.apply_defaults(args, "coverage")
        options.check_values(args, "coverage")
        bounds.check_all({"--jobs": (args.jobs, bounds.COUNT), "--memory-gb": (args.memory_gb, bounds.POSITIVE)})
        target = args.target or devices.default_target()[0]
        for name in (args.ref, target):
            devices.check_usable(name)
        plugins = tuple(str((cwd / p).resolve()) for p in args.plugin)
        for given, path in zip(args.plugin, plugins):
            if not Path(path).is_file():
                raise UsageError(f"--plugin {given!r}: no such file. Pass a Python file that registers architectures.")
        configs = getattr(args, "configs", None)
        if (args.archs or configs) and len(names) > 1:
            raise UsageError(f"architectures are named within one suite; got {len(names)} suites ({', '.join(names)}) "
                             "with ARCH arguments or --configs. Pass one --suite with the architectures, or none.")
        given, named, skipped = _sources(list(dict.fromkeys(args.archs)), configs, cwd, plugins, suites.get(names[0]))
        rerun = {c.strip() for c in args.rerun.split(",") if c.strip()}
        if rerun - set(map(str, Category)):
            raise UsageError(f"--rerun {args.rerun!r}: unknown categories; valid: {', '.join(map(str, Category))}.")
        output = (cwd / args.output).resolve()
        ensure_writable(output)
        write_baseline = str((cwd / args.write_baseline).resolve()) if args.write_baseline else None
        if write_baseline:
            ensure_writable(Path(write_baseline).parent)
        if given:
            archs = tuple((names[0], a) for a in given)
        else:
            archs = tuple((n, a) for n in names for a in sorted(suites.get(n).architectures()))
        source = ("user list" + (f" and --configs {configs}" if configs else "") if args.archs
                  else f"--configs {configs}" if configs else "; ".join(f"{n}: {suites.get(n).source}" for n in names))
        return cls(suites=names, method=method.name, archs=archs, names=named, skipped_configs=skipped,
                   trust_remote_code=bool(getattr(args, "trust_remote_code", False)), source=source, modes=modes,
                   ref=args.ref, target=target, compile=args.compile, plugins=plugins, tol=args.tol,
                   seed=args.seed, jobs=args.jobs, threads=max(1, len(os.sched_getaffinity(0)) // args.jobs),
                   timeout=float(args.timeout), memory_gb=float(args.memory_gb), reuse_workers=_reuse(os.environ),
                   output=str(output), restart=args.restart,
                   rerun=frozenset(Category(c) for c in rerun),
                   baseline=load_baseline(args.baseline, target, cwd, names, method.name) if args.baseline else None,
                   write_baseline=write_baseline)


def _reuse(environ: Mapping[str, str]) -> bool:
    value = environ.get(REUSE_ENV, "1")
    if value not in ("0", "1"):
        raise UsageError(f"{REUSE_ENV}={value!r}: valid values are 1 (a warm worker takes the next architecture, the "
                         "default) and 0 (a fresh process per architecture). Set one, or unset it.")
    return value == "1"


def _modes(text: str | None, chosen: list, method: Any) -> tuple[Mode, ...]:
    """The requested modes (default: the suites' own, or the method's); one no chosen suite has is refused."""
    have = {m for s in chosen for m in s.modes}
    if method.modes is not None:
        have &= set(method.modes)
    if text is None:
        modes = have
    else:
        modes = {parse_mode(m) for m in text.split(",") if m.strip()}
        if not modes:
            raise UsageError(f"--modes {text!r}: no mode given; valid: {', '.join(m.value for m in Mode)}.")
        if modes - have:
            whose = f"--method {method.name}" if method.modes is not None else f"the {', '.join(s.name for s in chosen)} suite"
            raise UsageError(f"--modes {text!r}: {', '.join(sorted(map(str, modes - have)))} does not apply to {whose}; "
                             f"its modes: {', '.join(m.value for m in Mode if m in have)}.")
    return tuple(m for m in (Mode.FORWARD, Mode.GENERATE, Mode.TRAIN) if m in modes)


def known_types(plugins: tuple[str, ...]) -> set[str]:
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


def _method(name: str, trust_remote_code: bool) -> Any:
    from torchferry.coverage import methods

    return methods.get(name, trust_remote_code)


# what a Python file given as an architecture should have been (torchferry.workloads.model_source.refuse_slips)
PLUGIN_FILE = ("a custom architecture's file is given with --plugin {file} (it registers its config and model with "
               "AutoConfig/AutoModelForCausalLM.register), followed by the model type it registers.")


def _sources(given: list[str], configs: str | None, cwd: Path, plugins: tuple[str, ...],
             suite: Any) -> tuple[tuple[str, ...], dict[str, tuple[str, str | None]], tuple[str, ...]]:
    """The specs workers get (model types as given; config files and folders as absolute config.json paths; Hub
    ids as given, their config fetched into the cache now), the row names of those whose spec is not their name,
    and the files of ``--configs`` that are not model configs (named, with why).

    Every form of torchferry.workloads.model_source is accepted; anything else is refused here, with the forms.
    """
    import difflib

    from torchferry.workloads import model_source

    specs: list[str] = []
    names: dict[str, tuple[str, str | None]] = {}
    found: list[model_source.ModelSource] = []
    types: list[str] = []
    known = known_types(plugins) if plugins else None  # model types a config file may name (None: transformers')
    for name in given:
        model_source.refuse_slips(name, PLUGIN_FILE)
        path = cwd / name
        if name.endswith(".json") or path.exists() or (model_source.HUB_ID.match(name) and "/" in name):
            found.append(model_source.resolve(name, cwd, known_types=known))
        else:
            types.append(name)
            specs.append(name)
    skipped: list[str] = []
    if configs:
        folder = model_source.folder_sources((cwd / configs).resolve(), configs, known)
        found += folder.sources
        skipped = folder.skipped
    if found and suite.name == "diffusers":
        raise UsageError(f"the diffusers suite builds its own tiny configs; configs and Hub ids are not accepted. "
                         f"Pass names of: {', '.join(suite.choices(plugins))}.")
    for source in found:
        spec = source.spec if source.kind == "hub" else source.config_path
        specs.append(spec)
        names[spec] = (source.name, source.hub_id)
    if types:
        for name in suite.unknown(types, plugins):
            close = difflib.get_close_matches(name, suite.choices(plugins), n=3)
            raise UsageError(f"unknown architecture {name!r} for the {suite.name} suite"
                             + (f"; did you mean {', '.join(close)}?" if close else "")
                             + f". A model is named as {model_source.FORMS}; or register an architecture with --plugin.")
    return tuple(dict.fromkeys(specs)), names, tuple(skipped)


def baseline_path(suite: str, device: str, method: str) -> Path:
    """The shipped baseline of a suite on a device: ``baselines/<suite>/<device>.json`` (``-<method>`` for another method)."""
    from torchferry.coverage import methods

    tail = "" if method == methods.TORCHFERRY.name else f"-{method}"
    return BASELINES / suite / f"{device.split(':')[0]}{tail}.json"


def load_baseline(spec: str, device: str, cwd: Path, suites: tuple[str, ...], method: str) -> tuple[str, dict]:
    """The expected rows (``auto``: the shipped file of the one suite measured)."""
    if spec == "auto" and len(suites) > 1:
        raise UsageError(f"--baseline without a file compares one suite with its shipped baseline; got {len(suites)} "
                         f"suites ({', '.join(suites)}). Pass one --suite, or --baseline FILE.")
    path = baseline_path(suites[0], device, method) if spec == "auto" else (cwd / spec).resolve()
    if not path.is_file():
        shipped = ", ".join(sorted(f"{p.parent.name}/{p.stem}" for p in BASELINES.glob("*/*.json"))) or "none"
        raise UsageError(f"baseline {str(path)!r} does not exist (shipped baselines: {shipped}). Write one with "
                         "--write-baseline FILE, or pass --baseline FILE.")
    try:
        return str(path), json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"baseline {str(path)!r} is not valid JSON ({exc}). Regenerate it with --write-baseline.") from exc
