"""Parity: the fp64-relative rule of PyTorch's dynamo benchmarks, applied device to device.

For each tensor: pass when ``allclose(target, ref, atol=rtol=tol)``; otherwise compute the
RMSE of the target and of the reference device against a float64 golden value computed on
the reference device, and pass when ``rmse_target <= multiplier * rmse_ref + tol / 10``.
The multiplier is 2 for float32 results and 3 for bfloat16/float16 results, tensors under
1000 elements, or tol >= 2e-2 (``same()`` in torch/_dynamo/utils.py). Cosine similarity
and the allclose verdict are reported beside. The policy is documented in docs/check/parity.md.

The tolerance is resolved once per run (``Tolerance.resolve``) and handed to every judge: each
command assembles its own result from these comparisons (check/parity.py, coverage/worker.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchferry.harness.modes import Mode
from torchferry.records import Record
from torchferry.report.comparison import Comparison, ComparisonStatus

# (mode, dtype) -> tol, from the HuggingFace suite of the dynamo benchmarks (inference 1e-3,
# training 1e-2) and TorchBench's `higher_bf16` (1e-2) for bfloat16; bf16 training doubles it.
TOLERANCES = {
    (Mode.FORWARD, "float32"): 1e-3,
    (Mode.GENERATE, "float32"): 1e-3,
    (Mode.TRAIN, "float32"): 1e-2,
    (Mode.FORWARD, "bfloat16"): 1e-2,
    (Mode.GENERATE, "bfloat16"): 1e-2,
    (Mode.TRAIN, "bfloat16"): 2e-2,
}
RULE = "allclose(atol=rtol=tol), else rmse(target, fp64) <= multiplier * rmse(ref, fp64) + tol/10"
MULTIPLIERS = "2 (float32); 3 (bfloat16/float16, numel < 1000 or tol >= 2e-2)"


@dataclass(frozen=True, kw_only=True)
class Tolerance(Record):
    """The parity tolerance of one run: its value, where it came from, and the precision it applies to."""

    tol: float
    source: str  # "--tol" or "default for (mode, dtype)"
    dtype: str = "float32"

    @property
    def given(self) -> bool:
        """Whether the user chose it (--tol), rather than the default for the mode and precision."""
        return self.source == "--tol"

    @property
    def low_precision(self) -> bool:
        return self.dtype != "float32"

    @classmethod
    def resolve(cls, mode: Mode, dtype: str, override: float | None = None) -> Tolerance:
        if override is not None:
            return cls(tol=float(override), source="--tol", dtype=dtype)
        return cls(tol=TOLERANCES[(Mode(mode), dtype)], source=f"default for ({Mode(mode).value}, {dtype})", dtype=dtype)

    def described(self) -> dict:
        """The tolerance as a report states it: its value and source, and the rule and multipliers it is used in."""
        return {"tol": self.tol, "source": self.source, "dtype": self.dtype, "rule": RULE, "multiplier": MULTIPLIERS}


def multiplier(dtype: Any, numel: int, tol: float, low_precision: bool) -> float:
    import torch

    if low_precision or dtype in (torch.float16, torch.bfloat16) or numel < 1000 or tol >= 2e-2:
        return 3.0
    return 2.0


CHUNK = 1 << 20  # elements judged at a time: the float64 working set stays ~100 MB whatever the tensor


def _chunks(*tensors: Any) -> Any:
    """Aligned flat slices of ``tensors`` (on the CPU, as float64), ``CHUNK`` elements at a time."""
    flat = [t.detach().reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK):
        yield [f[start:start + CHUNK].cpu().double() for f in flat]


def compare(name: str, ref: Any, target: Any, golden: Any | None, tol: float, low_precision: bool = False) -> Comparison:
    """Judge ``target`` against ``ref`` with ``golden`` (fp64) as the arbiter; figures always filled.

    Streamed: the tensors are read ``CHUNK`` elements at a time, so a 786M-element embedding gradient
    is judged without a float64 copy of it (the verdict and figures are those of the whole tensor).
    """
    import torch

    numel = int(target.numel())
    if ref.shape != target.shape:
        return Comparison(name, False, ComparisonStatus.FAIL_SHAPE, numel=numel)
    if ref.dtype != target.dtype:
        return Comparison(name, False, ComparisonStatus.FAIL_DTYPE, numel=numel)
    with_golden = golden is not None and golden.shape == target.shape
    close, all_both, any_both, r_nonzero, t_nonzero = True, True, False, False, False
    dot = r_sq = t_sq = max_abs = sq_t = sq_r = 0.0
    counted = 0
    for parts in _chunks(ref, target, *([golden] if with_golden else [])):
        r, t = parts[0], parts[1]
        ref_finite, tgt_finite = torch.isfinite(r), torch.isfinite(t)
        if not bool((ref_finite == tgt_finite).all()):
            return Comparison(name, False, ComparisonStatus.NON_FINITE, numel=numel, tol=tol)
        close = close and bool(torch.allclose(t, r, atol=tol, rtol=tol, equal_nan=True))
        both = ref_finite & tgt_finite
        all_both = all_both and bool(both.all())
        rb, tb = r[both], t[both]
        if rb.numel():
            any_both = True
            r_nonzero, t_nonzero = r_nonzero or bool(rb.any()), t_nonzero or bool(tb.any())
            dot, r_sq, t_sq = dot + float(rb @ tb), r_sq + float(rb @ rb), t_sq + float(tb @ tb)
            max_abs = max(max_abs, float((tb - rb).abs().max()))
            if with_golden:
                gb = parts[2][both]
                sq_t, sq_r = sq_t + float(((tb - gb) ** 2).sum()), sq_r + float(((rb - gb) ** 2).sum())
                counted += rb.numel()
    zero = all_both and not r_nonzero and not t_nonzero
    # cosine is undefined when a side is all zero: None, not torch's 0 (two zero gradients are identical)
    cosine = dot / max((r_sq ** 0.5) * (t_sq ** 0.5), COSINE_EPS) if any_both and r_nonzero and t_nonzero else None
    mult = multiplier(target.dtype, numel, tol, low_precision)
    result = Comparison(name, close, ComparisonStatus.PASS_ALLCLOSE if close else ComparisonStatus.FAIL_ACCURACY, tol=tol, allclose=close,
                        cosine=cosine, max_abs_diff=max_abs, numel=numel, multiplier=mult, zero=zero)
    if with_golden:
        result.rmse_target = (sq_t / counted) ** 0.5 if counted else float("nan")
        result.rmse_ref = (sq_r / counted) ** 0.5 if counted else float("nan")
        if not close and result.rmse_target <= mult * result.rmse_ref + tol / 10:
            result.passed, result.status = True, ComparisonStatus.PASS
    return result


COSINE_EPS = 1e-8  # torch.nn.functional.cosine_similarity's eps


def compare_tokens(ref: Any, target: Any, golden: Any | None) -> tuple[Comparison, dict]:
    """Greedy tokens judged, one rule for every command: equal passes; a mismatch fails, unless the float64 golden
    run's tokens also differ from the reference's (the argmax was a near tie, which the reference's own rounding
    decides: not the device's fault). Returns the comparison and the details a report shows."""
    import torch

    same_shape = ref.shape == target.shape
    mismatch = (ref != target).flatten().nonzero() if same_shape else None
    first = 0 if not same_shape else int(mismatch[0]) if len(mismatch) else None
    golden_agrees = golden is not None and golden.shape == ref.shape and bool(torch.equal(golden, ref))
    near_tie = first is not None and golden is not None and not golden_agrees
    passed = first is None or near_tie
    details = {"match": first is None, "first_mismatch": first, "near_tie": near_tie, "ref": ref.tolist(),
               "target": target.tolist(), "fp64_matches_ref": golden_agrees}
    status = ComparisonStatus.PASS_ALLCLOSE if first is None else ComparisonStatus.PASS if near_tie else \
        ComparisonStatus.FAIL_ACCURACY
    note = "a near tie: the float64 run picks other tokens than the reference too" if near_tie else None
    return Comparison("generated tokens", passed, status, numel=int(target.numel()), note=note), details


def compare_dicts(prefix: str, ref: dict, target: dict, golden: dict | None, tol: float, low: bool) -> list[Comparison]:
    golden = golden or {}
    return [compare(f"{prefix}{k}", ref[k], target[k], golden.get(k), tol, low) for k in ref if k in target]


def localise(ref: dict, target: dict, golden: dict | None, tol: float, low: bool) -> tuple[list[Comparison], Comparison | None]:
    """Per-module outputs in the target's execution order; the first one outside tolerance is named."""
    modules = [compare(k, ref[k], target[k], (golden or {}).get(k), tol, low) for k in target if k in ref]
    return modules, next((m for m in modules if not m.passed), None)
