"""Parity: the fp64-relative rule of PyTorch's dynamo benchmarks, applied device to device.

For each tensor: pass when ``allclose(target, ref, atol=rtol=tol)``; otherwise compute the
RMSE of the target and of the reference device against a float64 golden value computed on
the reference device, and pass when ``rmse_target <= multiplier * rmse_ref + tol / 10``.
The multiplier is 2 for float32 results and 3 for bfloat16/float16 results, tensors under
1000 elements, or tol >= 2e-2 (``same()`` in torch/_dynamo/utils.py). Cosine similarity
and the allclose verdict are reported beside. The policy is documented in docs/check/parity.md.
"""

from __future__ import annotations

import math
from typing import Any

from torchferry.check.results import Comparison, ParityResult

# (mode, dtype) -> tol, from the HuggingFace suite of the dynamo benchmarks (inference 1e-3,
# training 1e-2) and TorchBench's `higher_bf16` (1e-2) for bfloat16; bf16 training doubles it.
TOLERANCES = {
    ("inference", "float32"): 1e-3,
    ("generation", "float32"): 1e-3,
    ("training", "float32"): 1e-2,
    ("inference", "bfloat16"): 1e-2,
    ("generation", "bfloat16"): 1e-2,
    ("training", "bfloat16"): 2e-2,
}


def tolerance(mode: str, dtype: str, override: float | None = None) -> float:
    return override if override is not None else TOLERANCES[(mode, dtype)]


def multiplier(dtype: Any, numel: int, tol: float, low_precision: bool) -> float:
    import torch

    if low_precision or dtype in (torch.float16, torch.bfloat16) or numel < 1000 or tol >= 2e-2:
        return 3.0
    return 2.0


def _rmse(x: Any, y: Any) -> float:
    return float(((x.double() - y.double()) ** 2).mean().sqrt())


def compare(name: str, ref: Any, target: Any, golden: Any | None, tol: float, low_precision: bool = False) -> Comparison:
    """Judge ``target`` against ``ref`` with ``golden`` (fp64) as the arbiter; figures always filled."""
    import torch

    numel = int(target.numel())
    if ref.shape != target.shape:
        return Comparison(name, False, "fail_shape", numel=numel)
    if ref.dtype != target.dtype:
        return Comparison(name, False, "fail_dtype", numel=numel)
    r, t = ref.double(), target.double()
    ref_finite, tgt_finite = torch.isfinite(r), torch.isfinite(t)
    if not bool((ref_finite == tgt_finite).all()):
        return Comparison(name, False, "non_finite", numel=numel, tol=tol)
    close = bool(torch.allclose(t, r, atol=tol, rtol=tol, equal_nan=True))
    both = ref_finite & tgt_finite
    cosine = float(torch.nn.functional.cosine_similarity(r[both].flatten(), t[both].flatten(), dim=0)) if both.any() else 1.0
    max_abs = float((t[both] - r[both]).abs().max()) if both.any() else 0.0
    mult = multiplier(target.dtype, numel, tol, low_precision)
    result = Comparison(name, close, "pass_allclose" if close else "fail_accuracy", tol=tol, allclose=close,
                        cosine=cosine, max_abs_diff=max_abs, numel=numel, multiplier=mult)
    if golden is not None and golden.shape == target.shape:
        g = golden.double()
        result.rmse_target, result.rmse_ref = _rmse(t[both], g[both]), _rmse(r[both], g[both])
        if not close and result.rmse_target <= mult * result.rmse_ref + tol / 10:
            result.passed, result.status = True, "pass"
    return result


def ratio(c: Comparison) -> float | None:
    """How much further from fp64 the target is than the reference (the plotted per-module error)."""
    if c.rmse_target is None or c.rmse_ref is None:
        return None
    if c.rmse_ref == 0:
        return 1.0 if c.rmse_target == 0 else math.inf
    return c.rmse_target / c.rmse_ref


def compare_dicts(prefix: str, ref: dict, target: dict, golden: dict | None, tol: float, low: bool) -> list[Comparison]:
    golden = golden or {}
    return [compare(f"{prefix}{k}", ref[k], target[k], golden.get(k), tol, low) for k in ref if k in target]


def localise(ref: dict, target: dict, golden: dict | None, tol: float, low: bool) -> tuple[list[Comparison], Comparison | None]:
    """Per-module outputs in the target's execution order; the first one outside tolerance is named."""
    modules = [compare(k, ref[k], target[k], (golden or {}).get(k), tol, low) for k in target if k in ref]
    return modules, next((m for m in modules if not m.passed), None)


def judge(cfg: dict, ref: dict, target: dict, determinism: dict | None) -> ParityResult:
    """The parity result from the two workers' tensors (``ref`` includes the fp64 ``golden`` run)."""
    import torch

    tol = tolerance(cfg["mode"], cfg["dtype"], cfg.get("tol"))
    low = cfg["dtype"] != "float32"
    golden = ref["golden"]
    result = ParityResult(tolerance={
        "tol": tol, "rule": "allclose(atol=rtol=tol), else rmse(target, fp64) <= multiplier * rmse(ref, fp64) + tol/10",
        "multiplier": "2 (float32); 3 (bfloat16/float16, numel < 1000 or tol >= 2e-2)", "dtype": cfg["dtype"],
    })
    result.deterministic = determinism["deterministic"] if determinism else None
    result.outputs = compare_dicts("", ref["probe"]["outputs"], target["probe"]["outputs"], golden["probe"]["outputs"], tol, low)
    result.modules, result.first_divergent_module = localise(
        ref["probe"]["modules"], target["probe"]["modules"], golden["probe"]["modules"], tol, low)
    failed = [c for c in result.outputs if not c.passed]
    if cfg["mode"] == "training":
        result.gradients = compare_dicts("grad ", ref["run"]["grads"], target["run"]["grads"], golden["run"]["grads"], tol, low)
        failed += [c for c in result.gradients if not c.passed]
        losses = {k: v["run"]["losses"] for k, v in (("ref", ref), ("target", target), ("fp64", golden))}
        curve = compare("loss curve", torch.tensor(losses["ref"]), torch.tensor(losses["target"]),
                        torch.tensor(losses["fp64"]), tol, low)
        result.loss_curve = {**losses, "comparison": curve}
        failed += [] if curve.passed else [curve]
    if cfg["mode"] == "generation":
        tokens = {k: v["run"]["tokens"] for k, v in (("ref", ref), ("target", target), ("fp64", golden))}
        same_shape = tokens["ref"].shape == tokens["target"].shape
        mismatch = (tokens["ref"] != tokens["target"]).flatten().nonzero() if same_shape else None
        first = None if mismatch is None or len(mismatch) == 0 else int(mismatch[0])
        match = same_shape and first is None
        result.tokens = {"match": match, "first_mismatch": first, "ref": tokens["ref"].tolist(),
                         "target": tokens["target"].tolist(),
                         "fp64_matches_ref": bool(tokens["fp64"].shape == tokens["ref"].shape and torch.equal(tokens["fp64"], tokens["ref"]))}
        if not match:
            failed.append(Comparison("generated tokens", False, "fail_accuracy"))
    if any(c.status == "non_finite" for c in failed):
        result.status = "non_finite"
    elif failed:
        result.status = "fail_accuracy"
    elif result.deterministic is False:
        result.status = "eager_two_runs_differ"
    else:
        result.status = "pass"
    if failed:
        result.notes.append(f"{len(failed)} check(s) outside tolerance; first: {failed[0].name}")
    if result.deterministic is False:
        result.notes.append(f"the reference is not deterministic: two runs differ first at {determinism['first_difference']}")
    if failed and result.first_divergent_module is not None:
        m = result.first_divergent_module
        result.notes.append(f"first divergent module: {m.name} ({describe(m)})")
    return result


def describe(c: Comparison) -> str:
    """One line of figures: the rule's inputs and the reported extras."""
    parts = []
    if c.rmse_target is not None:
        parts.append(f"rmse vs fp64 {c.rmse_target:.3g} (target) vs {c.rmse_ref:.3g} (ref), limit x{c.multiplier:g} + {c.tol / 10:.1g}")
    if c.cosine is not None:
        parts.append(f"cosine {c.cosine:.6f}")
    if c.max_abs_diff is not None:
        parts.append(f"max |diff| {c.max_abs_diff:.3g}")
    return "; ".join(parts) or c.status
