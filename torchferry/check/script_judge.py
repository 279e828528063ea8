"""Judge the records of an unchanged script's runs: parity as convergence, time, rehearsal and exit.

Parity (docs/check/parity.md, "Unchanged scripts"): the per-step loss and gradient-norm curves and
the final parameters of the target against the reference's.

- Where both devices run the same kernels (a target that emulates another device on this host,
  whose kernels are the CPU's, against the ``cpu`` reference), the rule is exact: every recorded
  loss and gradient norm equal, and the final parameters' digests equal.
- Otherwise (a real target, or a target that draws random numbers on the device, e.g. dropout, whose
  random stream is not the CPU's) the reference ran twice, the second time with every torch seed
  offset by one, and that spread sets the band: the target passes a step when
  ``|target - ref| <= max(BAND_FACTOR * max_steps |ref - ref_again|, tol * max(1, |ref|))``, ``tol`` the
  training tolerance of the documented rule. The final parameters, all of them as one vector, pass when their
  cosine similarity to the reference's is at least ``1 - tol``: another random stream moves every parameter a
  little (max |diff| and allclose are reported beside), and the curves decide convergence.

A loss that is non-finite on the target where the reference's is finite is ``non_finite``.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from torchferry.check import rehearsal as rehearsal_mod
from torchferry.check import timing as timing_mod
from torchferry.check.exit import MAP_LOCATION_FIX, loader_env
from torchferry.check.script import ChildRun
from torchferry.harness.parity import Tolerance, compare
from torchferry.harness.protocol import run_to_end
from torchferry.report.check import (
    DeviceTiming,
    ExitFormat,
    ExitResult,
    ParityResult,
    ParityStatus,
    RehearsalResult,
    ResultStatus,
)
from torchferry.report.comparison import Comparison, ComparisonStatus

BAND_FACTOR = 3.0
LOADER = Path(__file__).with_name("checkpoint_loader.py")
WARMUP_SHARE = 0.5  # the steady step is the median of the steps after this share of the run


def _first_difference(ref: list, target: list, allowed: list[float] | None) -> int | None:
    for i, (r, t) in enumerate(zip(ref, target)):
        if r is None or t is None:
            continue
        if allowed is None:
            if not (r == t or (math.isnan(r) and math.isnan(t))):
                return i
        elif not abs(t - r) <= allowed[i]:
            return i
    return None


def _allowed(ref: list, again: list | None, tol: float) -> list[float]:
    """Per step: BAND_FACTOR x the largest seed-to-seed spread over the run (two curves cross now and then, so
    one step's spread alone can be near zero), at least ``tol x max(1, |ref|)``."""
    spreads = [abs(r - a) for r, a in zip(ref, again or ref) if r is not None and a is not None
               and math.isfinite(r) and math.isfinite(a)]
    spread = max(spreads, default=0.0)
    return [max(BAND_FACTOR * spread, tol * max(1.0, abs(r or 0.0))) for r in ref]


def shape_difference(ref: dict, target: dict) -> str | None:
    """How the tensors of the first backward differ in shape between two runs (None when they do not, or when a
    run did not record them): the exact rule needs the same kernels on the same shapes."""
    from collections import Counter

    a, b = ref.get("first_backward_shapes"), target.get("first_backward_shapes")
    if not a or not b:
        return None
    only_ref = Counter(map(tuple, (x[:2] + [tuple(x[2])] for x in a)))
    only_target = Counter(map(tuple, (x[:2] + [tuple(x[2])] for x in b)))
    only_ref, only_target = only_ref - only_target, only_target - only_ref
    if not only_ref and not only_target:
        return None
    pairs = []
    for node, attr, shape in sorted(only_ref):
        other = next((t for t in sorted(only_target) if t[:2] == (node, attr)), None)
        pairs.append(f"{node}.{attr} {list(shape)} on the reference, "
                     + (f"{list(other[2])} on the target" if other else "absent on the target"))
    pairs += [f"{node}.{attr} {list(shape)} on the target only" for node, attr, shape in sorted(only_target)
              if not any(r[:2] == (node, attr) for r in only_ref)]
    more = f" and {len(pairs) - 2} more" if len(pairs) > 2 else ""
    return "; ".join(pairs[:2]) + more


def curve(name: str, ref: list, target: list, again: list | None, exact: bool, tol: float) -> dict:
    """One recorded curve judged: equal (exact) or within the band; the figures and the first step outside."""
    n = min(len(ref), len(target))
    allowed = None if exact else _allowed(ref[:n], (again or ref)[:n], tol)
    first = _first_difference(ref[:n], target[:n], allowed)
    finite_ref = all(v is not None and math.isfinite(v) for v in ref[:n])
    finite_target = all(v is not None and math.isfinite(v) for v in target[:n])
    diffs = [abs(t - r) for r, t in zip(ref[:n], target[:n]) if r is not None and t is not None
             and math.isfinite(r) and math.isfinite(t)]
    status = ComparisonStatus.NON_FINITE if finite_ref and not finite_target else (
        ComparisonStatus.FAIL_SHAPE if len(ref) != len(target) else
        ComparisonStatus.FAIL_ACCURACY if first is not None else ComparisonStatus.PASS_ALLCLOSE)
    passed = status == ComparisonStatus.PASS_ALLCLOSE
    comparison = Comparison(name, passed, status, tol=0.0 if exact else tol, allclose=passed,
                            max_abs_diff=max(diffs) if diffs else 0.0, numel=n)
    return {"ref": ref, "target": target, "ref_again": again, "rule": "exact" if exact else "band",
            "first_difference": first, "comparison": comparison}


def parity(ref: dict, again: dict | None, target: dict, exact: bool, tolerance: Tolerance,
           ref_tensors: str | None, target_tensors: str | None) -> ParityResult:
    """The parity result of the script's runs (records of the reference, its repeat, the target)."""
    result = ParityResult(tolerance={**tolerance.to_dict(), "rule": "exact (same kernels)" if exact else
                                     f"band: max({BAND_FACTOR:g} x the reference's largest seed-to-seed spread, tol x max(1, |ref|))"})
    tol = tolerance.tol
    losses = curve("loss curve", ref["losses"], target["losses"], again["losses"] if again else None, exact, tol)
    result.loss_curve = losses
    failed = [] if losses["comparison"].passed else [losses["comparison"]]
    notes = []
    if ref["steps"]:
        norms = curve("gradient norm curve", ref["grad_norms"], target["grad_norms"],
                      again["grad_norms"] if again else None, exact, tol)
        result.gradients = [norms["comparison"]]
        result.grad_norm_curve = norms
        failed += [] if norms["comparison"].passed else [norms["comparison"]]
        params = _parameters(ref, target, exact, tol, ref_tensors, target_tensors)
        if params is not None:
            result.outputs = [params]
            failed += [] if params.passed else [params]
    else:
        notes.append("the script made no optimizer step: parity is judged on the losses it recorded only")
    if ref["steps"] != target["steps"]:
        notes.append(f"the reference made {ref['steps']} optimizer steps, the target {target['steps']}")
        failed.append(Comparison("optimizer steps", False, ComparisonStatus.FAIL_SHAPE))
    if any(c.status == ComparisonStatus.NON_FINITE for c in failed):
        result.status = ParityStatus.NON_FINITE
        step = next((i for i, v in enumerate(target["losses"]) if v is None or not math.isfinite(v)), None)
        notes.insert(0, f"the target's loss is non-finite from backward call {step + 1 if step is not None else '?'} "
                        f"(loss {target['losses'][step] if step is not None else '?'}) where the reference's is finite")
    elif failed:
        result.status = ParityStatus.FAIL_ACCURACY
        first = failed[0]
        where = losses["first_difference"] if first is losses["comparison"] else None
        notes.insert(0, f"{len(failed)} check(s) outside the {'exact' if exact else 'band'} rule; first: {first.name}"
                        + (f" at backward call {where + 1}" if where is not None else ""))
    else:
        result.status = ParityStatus.PASS
    result.notes = notes
    return result


def _parameters(ref: dict, target: dict, exact: bool, tol: float, ref_tensors: str | None,
                target_tensors: str | None) -> Comparison | None:
    """The final parameters: digests equal (exact), else cosine >= 1 - tol over all of them (band)."""
    a, b = ref.get("parameters"), target.get("parameters")
    if not a or not b:
        return None
    if a["count"] != b["count"]:
        return Comparison("final parameters", False, ComparisonStatus.FAIL_SHAPE, numel=b["numel"])
    if exact or not (ref_tensors and target_tensors):
        same = a["digests"] == b["digests"]
        return Comparison("final parameters", same, ComparisonStatus.PASS_ALLCLOSE if same else ComparisonStatus.FAIL_ACCURACY,
                          tol=0.0, allclose=same, numel=b["numel"])
    import torch

    rs, ts = torch.load(ref_tensors, weights_only=True), torch.load(target_tensors, weights_only=True)
    r = torch.cat([t.double().flatten() for t in rs])
    t = torch.cat([x.double().flatten() for x in ts])
    if r.shape != t.shape or not bool(torch.isfinite(t).all()):
        return Comparison("final parameters", False, ComparisonStatus.NON_FINITE if r.shape == t.shape else
                          ComparisonStatus.FAIL_SHAPE, numel=b["numel"])
    cosine = float(torch.nn.functional.cosine_similarity(r, t, dim=0))
    passed = cosine >= 1 - tol
    return Comparison("final parameters", passed, ComparisonStatus.PASS if passed else ComparisonStatus.FAIL_ACCURACY,
                      tol=tol, allclose=bool(torch.allclose(t, r, atol=tol, rtol=tol)), cosine=cosine,
                      max_abs_diff=float((t - r).abs().max()), numel=b["numel"])


def device_timing(run: ChildRun, record: dict | None, emulates: str | None) -> DeviceTiming:
    """A run's times: to the first step, warm-up, steady step (median of the later steps) and the whole run."""
    record = record or {}
    ends = record.get("step_ends_s") or []
    durations = [b - a for a, b in zip(ends, ends[1:])]
    steady = durations[int(len(durations) * WARMUP_SHARE):] if durations else []
    figures = {"cold_start_s": ends[0] if ends else None, "time_to_n_s": ends[-1] if ends else None,
               "first_call_s": durations[0] if durations else None, "steps": durations, "emulates": emulates,
               "peak_memory": record.get("peak_memory") or {}, "unit": "steps", "units_per_step": 1.0}
    r = record.get("rehearsal") or {}
    if r:
        figures["ops"] = {"fallback": r.get("fallback_ops", {}), "executed_total": r.get("executed_calls", 0)}
    t = timing_mod.device_timing(run.device, figures, [steady] if steady else [])
    t.run_s = run.wall_s
    if steady and durations:
        median = statistics.median(steady)
        t.warmup_s = sum(d - median for d in durations[: int(len(durations) * WARMUP_SHARE)] if d > median)
    return t


def rehearsal(record: dict | None) -> RehearsalResult:
    if not record or not record.get("rehearsal"):
        return RehearsalResult(notes=["the target does not emulate another device: nothing to rehearse"])
    return rehearsal_mod.judge(record["rehearsal"])


def checkpoints(records: list[dict]) -> list[dict]:
    """The checkpoints a run wrote, last write per path, still on disk; a Hugging Face folder is one checkpoint."""
    latest: dict[str, dict] = {}
    for record in records:
        for c in record.get("checkpoints", []):
            latest[c["path"]] = c
    found: dict[str, dict] = {}
    for path, c in latest.items():
        p = Path(path)
        if not p.exists():
            continue
        if (p.parent / "config.json").is_file() and p.suffix in (".safetensors", ".bin"):
            found[str(p.parent)] = {"path": str(p.parent), "kind": "folder", "how": "save_pretrained",
                                    "step": c["step"]}
        elif str(p.parent) not in found or found[str(p.parent)]["kind"] != "folder":
            found[path] = {"path": path, "kind": "file", "how": c["how"], "step": c["step"]}
    return [c for path, c in found.items() if not (c["kind"] == "file" and str(Path(path).parent) in found)]


def exit_result(target_run: ChildRun, ref_device: str, env: dict[str, str], workdir: Path, timeout: float) -> ExitResult:
    """Reload every checkpoint the target wrote in a fresh reference-device process without torchferry."""
    record = target_run.main_record() or {}
    saved = checkpoints(target_run.records)
    result = ExitResult(loader_device=ref_device)
    if not saved:
        result.notes.append("the script wrote no checkpoint (torch.save, safetensors, save_pretrained) before it "
                            "ended" + (f" ({record.get('stopped')})" if record.get("stopped") else ""))
        return result
    spec, out = workdir / "checkpoints-spec.json", workdir / "checkpoints-loaded.json"
    spec.write_text(json.dumps({"device": ref_device, "checkpoints": saved}))
    out.unlink(missing_ok=True)
    code = run_to_end([sys.executable, str(LOADER), str(spec), str(out)], workdir / "checkpoint-loader.log",
                      timeout=timeout, env={**loader_env(), **env}, cwd=workdir)
    if code != 0 or not out.is_file():
        result.status = ResultStatus.FAIL
        result.notes.append(f"the checkpoint loader exited with status {code} (log: {workdir / 'checkpoint-loader.log'})")
        return result
    summary = json.loads(out.read_text())
    result.torchferry_absent = summary["torchferry_absent"]
    final = set((record.get("parameters") or {}).get("digests") or [])
    for item, loaded in zip(saved, summary["checkpoints"]):
        fmt = ExitFormat(name=f"{Path(item['path']).name} ({item['how']})", path=item["path"], saved=True, error=loaded["error"],
                         needs_package=loaded.get("needs_package"))
        fmt.loads_plain = loaded["how"] in ("weights_only", "safetensors", "from_pretrained")
        fmt.needs_map_location = loaded["how"] == "map_location"
        if fmt.needs_map_location:
            fmt.location_tags = [str(target_run.device)]
            fmt.fix = f"{loaded['plain_error']}: {MAP_LOCATION_FIX}"
        if loaded.get("unsafe_only"):
            fmt.fix = ("the file pickles Python objects besides tensors: it loads only with weights_only=False, from a "
                       "trusted source; save tensors (state dicts) where the file must travel")
        elif loaded["error"]:
            fmt.fix = ("the file pickles more than tensors (a device, a class): it loads only with weights_only=False "
                       "and, for a device object, only where that device exists; save state dicts of tensors "
                       "(str(device) for a device)") if not fmt.needs_package else \
                f"the file needs the package {fmt.needs_package!r} to load; save plain tensors"
        if final and loaded["digests"] and item["step"] < (record.get("steps") or 0):
            result.notes.append(f"{Path(item['path']).name}: written at step {item['step']} of {record.get('steps')}; "
                                "not compared with the final parameters")
        elif final and loaded["digests"]:
            found = len(final & set(loaded["digests"]))
            fmt.parity = Comparison("final parameters", found == len(final),
                                    ComparisonStatus.PASS_ALLCLOSE if found == len(final) else ComparisonStatus.MISSING,
                                    numel=found)
            if found != len(final):
                result.notes.append(f"{Path(item['path']).name}: holds {found} of the target's {len(final)} final "
                                    f"parameters exactly (written at step {item['step']} of {record.get('steps')})")
        result.formats.append(fmt)
    any_final = any(f.parity is not None and f.parity.passed for f in result.formats)
    unsafe = {item["path"] for item, loaded in zip(saved, summary["checkpoints"]) if loaded.get("unsafe_only")}
    broken = [f for f in result.formats if f.error and f.path not in unsafe]
    if broken or not result.torchferry_absent:
        result.status = ResultStatus.FAIL
    elif unsafe or any(f.needs_map_location for f in result.formats) or (final and not any_final):
        result.notes += [f"{Path(p).name}: loads only with weights_only=False (it pickles Python objects)" for p in unsafe]
        result.status = ResultStatus.CONDITIONS
        if final and not any_final:
            result.notes.append("no checkpoint holds the target's final parameters (the script saves before its last "
                                "step, or --steps stopped it before its save)")
    else:
        result.status = ResultStatus.PASS
    if result.torchferry_absent is False:
        result.notes.append("torchferry was imported while loading: the checkpoint depends on it")
    return result
