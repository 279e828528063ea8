"""Reversible exit: reload the target's checkpoints on the reference device without torchferry.

The target worker saved its trained model in each standard format, exactly as a user would
(no ``.cpu()`` first). ``exit_loader.py`` runs as a plain script in a fresh process with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (else ``import torch`` would load torchferry through its
``torch.backends`` entry point), tries each format with no ``map_location``, records the
storages' location tags, rebuilds the model with stock torch/transformers and runs the eval
batch at the run's dtype and in float64. Parity is then judged here with the same rule as
the main parity check: the target's own outputs against the reloaded model's. ``capture`` (the save,
in the target worker) and ``check`` (the reload and ``judge``, in the parent) are the two halves.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchferry.check.config import CheckConfig
from torchferry.errors import disk_full
from torchferry.harness import parity
from torchferry.harness.case import ModelCase
from torchferry.harness.protocol import run_to_end
from torchferry.report.check import ExitFormat, ExitResult, ResultStatus

LOADER = Path(__file__).with_name("exit_loader.py")
FOLDER = "exit"  # under the run's work folder: the saved formats, the architecture and the eval batch
EVAL_BATCH = "eval_batch.pt"

MAP_LOCATION_FIX = (
    "save device-independent checkpoints: torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path) "
    "(and the same for optimizer state); readers of existing files must pass torch.load(path, map_location='cpu')"
)


def folder(workdir: Path) -> Path:
    """Where the target saves its exit formats in a run whose work folder is ``workdir``."""
    return workdir / FOLDER


# -- capture (the target's rank 0) ----------------------------------------------------------------
def capture(case: ModelCase, model: Any, opt: Any, eval_model: Any, workdir: Path) -> tuple[dict, dict]:
    """Save what the target produced in the standard formats, as a user would (no ``.cpu()`` first): {saved,
    architecture} for the parent's reload, and ``eval_model``'s outputs on the eval batch it must reproduce."""
    exit_dir = folder(workdir)
    exit_dir.mkdir(parents=True, exist_ok=True)
    saved = save_formats(case, model, opt, exit_dir)
    if hasattr(model, "config") and hasattr(model.config, "to_json_file"):
        model.config.to_json_file(str(exit_dir / "config.json"))  # the architecture, for the state-dict formats
    case.torch.save(case.workload.batch("cpu", case.plan.eval_seed), exit_dir / EVAL_BATCH)
    return {"saved": saved, "architecture": architecture(case)}, case.eval_outputs(eval_model)


def save_formats(case: ModelCase, model: Any, opt: Any, exit_dir: Path) -> dict:
    """Each standard format written from the target: {name: {path}} or {name: {path, error, fix}}."""
    torch = case.torch
    saved: dict[str, Any] = {}

    def attempt(name: str, path: Path, save: Callable[[Any, Path], None]) -> None:
        try:
            save(model, path)
            saved[name] = {"path": str(path)}
        except Exception as exc:  # a format that cannot be saved from this device is a finding
            if disk_full(exc, path.parent):
                raise  # not a finding: the run cannot go on (reported as the output error it is)
            saved[name] = {"path": str(path), "error": f"{type(exc).__name__}: {exc}", "fix": save_fix(case, name, save, path)}

    attempt("torch.save state dict", exit_dir / "state_dict.pt", lambda m, p: torch.save(m.state_dict(), p))

    def save_safetensors(m: Any, p: Path) -> None:
        from safetensors.torch import save_model

        save_model(m, str(p))

    attempt("safetensors", exit_dir / "model.safetensors", save_safetensors)
    if hasattr(model, "save_pretrained"):
        attempt("save_pretrained", exit_dir / "pretrained", lambda m, p: m.save_pretrained(str(p)))
    if opt is not None:
        attempt("optimizer state", exit_dir / "optimizer.pt", lambda m, p: torch.save(opt.state_dict(), p))
    return saved


def save_fix(case: ModelCase, name: str, save: Callable[[Any, Path], None], path: Path) -> str:
    """The fix for a format that could not be saved: named from the cause, checked against a CPU copy."""
    extra = [k for k, v in case.pristine.state_dict().items()
             if k.endswith("_extra_state") and not isinstance(v, case.torch.Tensor)]
    if extra and name == "safetensors":
        return (f"{', '.join(extra)} holds a non-tensor value (the module's get_extra_state()); safetensors "
                "stores tensors only, on any device. Make get_extra_state() return tensors (or nothing), or "
                "use torch.save for this model")
    try:
        save(copy.deepcopy(case.pristine), path.with_name(f"cpu-probe-{path.name}"))
    except Exception as exc:
        return f"{name} fails on the CPU too ({type(exc).__name__}): the model itself cannot be saved this way"
    return f"{name} cannot be written from the target device; save a .cpu() copy"


def architecture(case: ModelCase) -> dict:
    """How a process without torchferry rebuilds this model, and which class's loader reads save_pretrained."""
    import importlib.util

    model = case.pristine
    transformers = sys.modules.get("transformers")
    loader = {"module": type(model).__module__, "class": type(model).__qualname__}
    if transformers is not None and isinstance(model, transformers.PreTrainedModel):
        return {"kind": "transformers", "class": type(model).__name__, "pretrained": loader}
    source = dict(case.workload.source)
    if source["kind"] == "module":
        source = {"kind": "file", "path": importlib.util.find_spec(source["module"]).origin, **{
            k: v for k, v in source.items() if k in ("attr", "options", "paths")}}
    return {**source, "pretrained": loader}


# -- check (the parent) ---------------------------------------------------------------------------
def loader_env() -> dict:
    """The environment of a machine without torchferry: no backend autoload, no torchferry on the path."""
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(root)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("TORCHFERRY_DEVICE", None)
    return env


def run_loader(spec: dict, workdir: Path, timeout: float) -> tuple[dict, dict]:
    """Run the loader in a fresh interpreter; returns (summary json, tensors)."""
    import torch

    spec_path, out = workdir / "exit-spec.json", workdir / "exit-loaded"
    spec_path.write_text(json.dumps(spec))
    script = (f"import runpy, sys; sys.argv = ['exit_loader', {str(spec_path)!r}, {str(out)!r}]; "
            f"runpy.run_path({str(LOADER)!r}, run_name='__main__')")
    log = workdir / "exit-loader.log"
    code = run_to_end([sys.executable, "-c", script], log, timeout=timeout, env=loader_env(), cwd=workdir)
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(f"the exit loader exited with {code}: {tail}")
    summary = json.loads(Path(f"{out}.json").read_text())
    return summary, torch.load(f"{out}.pt", weights_only=True)


def judge(summary: dict, loaded: dict, saved: dict, target_outputs: dict, cfg: CheckConfig) -> ExitResult:
    tol = cfg.tolerance
    result = ExitResult(torchferry_absent=summary["torchferry_absent"], loader_device=cfg.ref)
    for name, info in saved.items():
        fmt = ExitFormat(name=name, path=info["path"], saved="error" not in info, error=info.get("error"))
        result.formats.append(fmt)
        if not fmt.saved:
            fmt.fix = info.get("fix")
            continue
        record = summary["formats"].get(name, {})
        if record.get("skipped"):
            fmt.skipped = record["skipped"]
            continue
        fmt.loads_plain = bool(record.get("loads_plain"))
        fmt.location_tags = record.get("location_tags", [])
        fmt.needs_package = record.get("needs_package")
        fmt.error = record.get("error") or (None if fmt.loads_plain else record.get("plain_error"))
        device_tags = [t for t in fmt.location_tags if t.split(":")[0] != "cpu"]
        if device_tags:
            fmt.needs_map_location = True
            fmt.fix = f"device-tagged storages ({', '.join(device_tags)}): {MAP_LOCATION_FIX}"
        if fmt.needs_package:
            fmt.fix = f"the file needs the package {fmt.needs_package!r} to load; save plain tensors (state_dict / safetensors)"
        if name in loaded:
            comparisons = parity.compare_dicts("", loaded[name]["outputs"], target_outputs, loaded[name]["golden"],
                                               tol.tol, tol.low_precision)
            worst = next((c for c in comparisons if not c.passed), comparisons[0] if comparisons else None)
            fmt.parity = worst
    result.notes += [f"{f.name}: not reloaded: {f.skipped}" for f in result.formats if f.skipped]
    broken = [f for f in result.formats if not f.saved or f.needs_package or (f.error and not f.needs_map_location)
              or (f.parity is not None and not f.parity.passed)]
    tagged = [f for f in result.formats if f.needs_map_location]
    if broken or not result.torchferry_absent:
        result.status = ResultStatus.FAIL
    elif tagged:
        result.status = ResultStatus.CONDITIONS
    else:
        result.status = ResultStatus.PASS
    if not result.torchferry_absent:
        result.notes.append("torchferry was imported while loading: the model code depends on it")
    return result


def check(outdir: Path, saved: dict, architecture: dict, target_outputs: dict, cfg: CheckConfig) -> ExitResult:
    """Reload every saved format on the reference device in a torchferry-free process and judge it."""
    exit_dir = folder(outdir)
    spec = {"device": cfg.ref, "dtype": cfg.dtype, "architecture": architecture, "exit_dir": str(exit_dir),
            "eval_batch": str(exit_dir / EVAL_BATCH),
            "formats": {k: v["path"] for k, v in saved.items() if "error" not in v}}
    summary, loaded = run_loader(spec, exit_dir, cfg.timeout)
    return judge(summary, loaded, saved, target_outputs, cfg)
