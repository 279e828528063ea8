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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.check.config import CheckConfig
from torchferry.errors import disk_full
from torchferry.harness import parity
from torchferry.harness.case import ModelCase
from torchferry.harness.protocol import run_to_end
from torchferry.records import Record
from torchferry.report.check import ExitFormat, ExitResult, ResultStatus
from torchferry.report.comparison import Comparison, ComparisonStatus

LOADER = Path(__file__).with_name("exit_loader.py")
PORTABLE = Path(__file__).parents[1] / "harness" / "portable.py"  # the rules the loader shares, loaded by path
FOLDER = "exit"  # under the run's work folder: the saved formats, the architecture and the eval batch
EVAL_BATCH = "eval_batch.pt"

MAP_LOCATION_FIX = (
    "save device-independent checkpoints: torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path) "
    "(and the same for optimizer state); readers of existing files must pass torch.load(path, map_location='cpu')"
)


def folder(workdir: Path) -> Path:
    """Where the target saves its exit formats in a run whose work folder is ``workdir``."""
    return workdir / FOLDER


@dataclass(frozen=True, kw_only=True)
class SavedFormats(Record):
    """What the target saved: each format's path (or its error and fix), and how a process without torchferry
    rebuilds the model (``architecture``)."""

    saved: dict[str, dict]
    architecture: dict


# -- capture (the target's rank 0) ----------------------------------------------------------------
def capture(case: ModelCase, model: Any, opt: Any, eval_model: Any, workdir: Path) -> tuple[SavedFormats, dict]:
    """Save what the target produced in the standard formats, as a user would (no ``.cpu()`` first), for the parent's
    reload, and ``eval_model``'s outputs on the eval batch it must reproduce."""
    exit_dir = folder(workdir)
    exit_dir.mkdir(parents=True, exist_ok=True)
    saved = save_formats(case, model, opt, exit_dir)
    if hasattr(model, "config") and hasattr(model.config, "to_json_file"):
        model.config.to_json_file(str(exit_dir / "config.json"))  # the architecture, for the state-dict formats
    case.torch.save(case.workload.batch("cpu", case.plan.eval_seed), exit_dir / EVAL_BATCH)
    return SavedFormats(saved=saved, architecture=architecture(case)), case.eval_outputs(eval_model)


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


def run_loader(spec: dict, workdir: Path, timeout: float, env: dict[str, str] | None = None) -> dict:
    """Run the torchferry-free loader in a fresh interpreter on ``spec`` (its ``kind``: formats or checkpoints);
    returns its summary, with the reloaded outputs (``loaded``) of a formats job. ``env``: the reference side's
    environment variables (the accelerators it must not see)."""
    import torch

    spec_path, out = workdir / f"exit-{spec['kind']}.json", workdir / f"exit-{spec['kind']}-loaded"
    spec_path.write_text(json.dumps({**spec, "portable": str(PORTABLE)}))
    script = (f"import runpy, sys; sys.argv = ['exit_loader', {str(spec_path)!r}, {str(out)!r}]; "
              f"runpy.run_path({str(LOADER)!r}, run_name='__main__')")
    log = workdir / f"exit-loader-{spec['kind']}.log"
    code = run_to_end([sys.executable, "-c", script], log, timeout=timeout, env={**loader_env(), **(env or {})},
                      cwd=workdir)
    if code != 0 or not Path(f"{out}.json").is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
        raise RuntimeError(f"the exit loader exited with {code}: {tail} (log: {log})")
    summary = json.loads(Path(f"{out}.json").read_text())
    if spec["kind"] == "formats":
        summary["loaded"] = torch.load(f"{out}.pt", weights_only=True)
    return summary


def judge(summary: dict, saved: dict, target_outputs: dict, cfg: CheckConfig) -> ExitResult:
    tol, loaded = cfg.tolerance, summary["loaded"]
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


def check(outdir: Path, formats: SavedFormats, target_outputs: dict, cfg: CheckConfig) -> ExitResult:
    """Reload every saved format on the reference device in a torchferry-free process and judge it."""
    exit_dir = folder(outdir)
    spec = {"kind": "formats", "device": cfg.ref, "dtype": cfg.workload.dtype, "architecture": formats.architecture,
            "exit_dir": str(exit_dir), "eval_batch": str(exit_dir / EVAL_BATCH),
            "formats": {k: v["path"] for k, v in formats.saved.items() if "error" not in v}}
    return judge(run_loader(spec, exit_dir, cfg.timeout), formats.saved, target_outputs, cfg)


# -- an unchanged script's checkpoints -------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class CheckpointWrite(Record):
    """One checkpoint a script wrote (the recorders saw the call): where, how, and after how many optimizer steps."""

    path: str
    how: str  # torch.save | safetensors
    step: int
    at_s: float


def checkpoints(writes: list[CheckpointWrite]) -> list[dict]:
    """The checkpoints a run wrote, last write per path, still on disk; a Hugging Face folder is one checkpoint."""
    latest = {w.path: w for w in writes}
    found: dict[str, dict] = {}
    for path, w in latest.items():
        p = Path(path)
        if not p.exists():
            continue
        if (p.parent / "config.json").is_file() and p.suffix in (".safetensors", ".bin"):
            found[str(p.parent)] = {"path": str(p.parent), "kind": "folder", "how": "save_pretrained", "step": w.step}
        elif str(p.parent) not in found or found[str(p.parent)]["kind"] != "folder":
            found[path] = {"path": path, "kind": "file", "how": w.how, "step": w.step}
    return [c for path, c in found.items() if not (c["kind"] == "file" and str(Path(path).parent) in found)]


def check_checkpoints(saved: list[dict], final: list[list[str]], steps: int, stopped: str | None,
                      target_device: str, cfg: CheckConfig, env: dict[str, str],
                      located: Callable[[str], str] = str) -> ExitResult:
    """Reload every checkpoint the target's script wrote (``saved``: ``checkpoints()`` of its writes, listed while
    they were where it wrote them), in a fresh reference-device process without torchferry, and find in each the final
    parameters of the models the script trained (``final``: each optimizer's digests). ``located``: where a written
    path lies now (set aside under work/ while another run uses the script's folder)."""
    result = ExitResult(loader_device=cfg.ref)
    if not saved:
        result.notes.append("the script wrote no checkpoint (torch.save, safetensors, save_pretrained) before it "
                            "ended" + (f" ({stopped})" if stopped else ""))
        return result
    try:
        loaded_from = [{**item, "path": located(item["path"])} for item in saved]
        summary = run_loader({"kind": "checkpoints", "device": cfg.ref, "checkpoints": loaded_from}, cfg.workdir,
                             cfg.timeout, env)
    except RuntimeError as exc:
        result.status = ResultStatus.FAIL
        result.notes.append(str(exc))
        return result
    result.torchferry_absent = summary["torchferry_absent"]
    models = [set(digests) for digests in final if digests]
    for item, loaded in zip(saved, summary["checkpoints"]):
        fmt = ExitFormat(name=f"{Path(item['path']).name} ({item['how']})", path=item["path"], saved=True,
                         error=loaded["error"], needs_package=loaded.get("needs_package"))
        fmt.loads_plain = loaded["how"] in ("weights_only", "safetensors", "from_pretrained")
        fmt.needs_map_location = loaded["how"] == "map_location"
        if fmt.needs_map_location:
            fmt.location_tags = loaded.get("location_tags") or [str(target_device)]
            fmt.fix = f"{loaded['plain_error']}: {MAP_LOCATION_FIX}"
        if loaded.get("unsafe_only"):
            fmt.fix = ("the file pickles Python objects besides tensors: it loads only with weights_only=False, from a "
                       "trusted source; save tensors (state dicts) where the file must travel")
        elif loaded["error"]:
            fmt.fix = ("the file pickles more than tensors (a device, a class): it loads only with weights_only=False "
                       "and, for a device object, only where that device exists; save state dicts of tensors "
                       "(str(device) for a device)") if not fmt.needs_package else \
                f"the file needs the package {fmt.needs_package!r} to load; save plain tensors"
        held = set(loaded["digests"])
        if models and held and item["step"] < steps:
            result.notes.append(f"{Path(item['path']).name}: written at step {item['step']} of {steps}; not compared "
                                "with the final parameters")
        elif models and held and not any(m & held for m in models):
            result.notes.append(f"{Path(item['path']).name}: holds none of the final parameters, though written after "
                                f"the last step: a state the script kept from earlier (a best-model or averaged "
                                "copy); it reloads, and its values are not judged")
        elif models and held:
            best = max(models, key=lambda m: len(m & held))  # the model this checkpoint holds (a GAN's two apart)
            found = len(best & held)
            fmt.parity = Comparison("final parameters", found == len(best),
                                    ComparisonStatus.PASS_ALLCLOSE if found == len(best) else ComparisonStatus.MISSING,
                                    numel=found)
            if found != len(best):
                result.notes.append(f"{Path(item['path']).name}: holds {found} of the {len(best)} final parameters of "
                                    f"the model it saves exactly (written at step {item['step']} of {steps})")
        result.formats.append(fmt)
    any_final = any(f.parity is not None and f.parity.passed for f in result.formats)
    unsafe = {item["path"] for item, loaded in zip(saved, summary["checkpoints"]) if loaded.get("unsafe_only")}
    broken = [f for f in result.formats if f.error and f.path not in unsafe]
    if broken or not result.torchferry_absent:
        result.status = ResultStatus.FAIL
    elif unsafe or any(f.needs_map_location for f in result.formats) or (models and not any_final):
        result.notes += [f"{Path(p).name}: loads only with weights_only=False (it pickles Python objects)" for p in unsafe]
        result.status = ResultStatus.CONDITIONS
        if models and not any_final:
            result.notes.append("no checkpoint holds the target's final parameters (the script saves before its last "
                                "step or an earlier state, or --steps stopped it before its save): each reloads, and "
                                "whether it holds what the device held is not judged")
    else:
        result.status = ResultStatus.PASS
    if result.torchferry_absent is False:
        result.notes.append("torchferry was imported while loading: the checkpoint depends on it")
    return result
