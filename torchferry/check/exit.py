"""Reversible exit: reload the target's checkpoints on the reference device without torchferry.

The target worker saved its trained model in each standard format, exactly as a user would
(no ``.cpu()`` first). ``exit_loader.py`` runs as a plain script in a fresh process with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (else ``import torch`` would load torchferry through its
``torch.backends`` entry point), tries each format with no ``map_location``, records the
storages' location tags, rebuilds the model with stock torch/transformers and runs the eval
batch at the run's dtype and in float64. Parity is then judged here with the same rule as
the main parity check: the target's own outputs against the reloaded model's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from torchferry.check.config import CheckConfig
from torchferry.harness import parity
from torchferry.harness.protocol import run_to_end
from torchferry.report.check import ExitFormat, ExitResult, ResultStatus

LOADER = Path(__file__).with_name("exit_loader.py")

MAP_LOCATION_FIX = (
    "save device-independent checkpoints: torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path) "
    "(and the same for optimizer state); readers of existing files must pass torch.load(path, map_location='cpu')"
)


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
    exit_dir = outdir / "exit"
    spec = {"device": cfg.ref, "dtype": cfg.dtype, "architecture": architecture, "exit_dir": str(exit_dir),
            "eval_batch": str(exit_dir / "eval_batch.pt"),
            "formats": {k: v["path"] for k, v in saved.items() if "error" not in v}}
    summary, loaded = run_loader(spec, exit_dir, cfg.timeout)
    return judge(summary, loaded, saved, target_outputs, cfg)
