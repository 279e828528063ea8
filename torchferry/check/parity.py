"""The parity result of `ferry check`: captured in each worker, judged in the parent by the harness's parity rule.

``capture`` is the worker's half: the timed run's capture and its probe; on the reference also a second
run (the determinism check) and the float64 golden run. ``judge`` is the parent's. The rule itself (per tensor, fp64-relative, and per-module localisation) lives in
torchferry.harness.parity; this module assembles check's result from it: outputs, gradients (a
gradient missing on the target fails), the loss curve, generated tokens, the determinism of the
reference and the first divergent module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from torchferry.harness.case import Capture, ModelCase, ProbeCapture, RunCapture
from torchferry.harness.modes import Mode
from torchferry.harness.parity import Tolerance, compare, compare_dicts, localise
from torchferry.records import Record
from torchferry.report.check import ParityResult, ParityStatus
from torchferry.report.comparison import Comparison, ComparisonStatus, describe


@dataclass(frozen=True, kw_only=True)
class Determinism(Record):
    """The reference's two fresh runs compared bitwise: equal, or the first result that differs."""

    deterministic: bool
    first_difference: str | None = None


# -- capture (a worker) --------------------------------------------------------------------------
def capture(case: ModelCase, primary: RunCapture, reference: bool,
            progress: Callable[[str], None]) -> tuple[Capture, Determinism | None]:
    """This worker's capture of the timed run ``primary``, and on the reference its determinism (two fresh runs
    compared bitwise) and float64 golden run; the determinism is None on the target."""
    captured = Capture(run=primary, probe=case.probe())
    if not reference:
        return captured, None
    progress("second reference run (determinism check)")
    again, _ = case.run(case.fresh())
    determinism = compare_runs(primary, again, case.probe(), captured.probe)
    progress("float64 golden run")
    golden, _ = case.run(case.fresh(fp64=True), fp64=True)
    captured.golden = Capture(run=golden, probe=case.probe(fp64=True))
    return captured, determinism


def compare_runs(a: RunCapture, b: RunCapture, probe_a: ProbeCapture, probe_b: ProbeCapture) -> Determinism:
    """Two reference runs must agree bitwise (the dynamo harness's eager_two_runs_differ check)."""
    import torch

    pairs = [("loss curve", torch.tensor(a.losses), torch.tensor(b.losses))]
    pairs += [(f"output {k}", v, probe_b.outputs[k]) for k, v in probe_a.outputs.items()]
    pairs += [(f"grad {k}", v, b.grads[k]) for k, v in a.grads.items()]
    if a.tokens is not None:
        pairs.append(("tokens", a.tokens, b.tokens))
    for name, x, y in pairs:
        if x.shape != y.shape or not torch.equal(x, y):
            return Determinism(deterministic=False, first_difference=name)
    return Determinism(deterministic=True)


# -- judge (the parent) ---------------------------------------------------------------------------
def judge(mode: Mode, tolerance: Tolerance, ref: Capture, target: Capture, determinism: Determinism | None) -> ParityResult:
    """The parity result from the two workers' tensors (``ref`` includes the fp64 ``golden`` run).

    A gradient the reference has and the target lacks fails (a target code path that bypasses
    a parameter must not pass by omission).
    """
    import torch

    tol, low = tolerance.tol, tolerance.low_precision
    golden = ref.golden
    result = ParityResult(tolerance=tolerance.described())
    result.deterministic = determinism.deterministic if determinism else None
    result.outputs = compare_dicts("", ref.probe.outputs, target.probe.outputs, golden.probe.outputs, tol, low)
    result.modules, result.first_divergent_module = localise(
        ref.probe.modules, target.probe.modules, golden.probe.modules, tol, low)
    failed = [c for c in result.outputs if not c.passed]
    if mode == Mode.TRAIN:
        result.gradients = compare_dicts("grad ", ref.run.grads, target.run.grads, golden.run.grads, tol, low)
        result.gradients += [Comparison(f"grad {k}", False, ComparisonStatus.MISSING)
                             for k in ref.run.grads if k not in target.run.grads]
        failed += [c for c in result.gradients if not c.passed]
        losses = {k: v.run.losses for k, v in (("ref", ref), ("target", target), ("fp64", golden))}
        curve = compare("loss curve", torch.tensor(losses["ref"]), torch.tensor(losses["target"]),
                        torch.tensor(losses["fp64"]), tol, low)
        result.loss_curve = {**losses, "comparison": curve}
        failed += [] if curve.passed else [curve]
    if mode == Mode.GENERATE:
        tokens = {k: v.run.tokens for k, v in (("ref", ref), ("target", target), ("fp64", golden))}
        same_shape = tokens["ref"].shape == tokens["target"].shape
        mismatch = (tokens["ref"] != tokens["target"]).flatten().nonzero() if same_shape else None
        first = None if mismatch is None or len(mismatch) == 0 else int(mismatch[0])
        match = same_shape and first is None
        result.tokens = {"match": match, "first_mismatch": first, "ref": tokens["ref"].tolist(),
                         "target": tokens["target"].tolist(),
                         "fp64_matches_ref": bool(tokens["fp64"].shape == tokens["ref"].shape and torch.equal(tokens["fp64"], tokens["ref"]))}
        if not match:
            failed.append(Comparison("generated tokens", False, ComparisonStatus.FAIL_ACCURACY))
    if any(c.status == ComparisonStatus.NON_FINITE for c in failed):
        result.status = ParityStatus.NON_FINITE
    elif failed:
        result.status = ParityStatus.FAIL_ACCURACY
    elif result.deterministic is False:
        result.status = ParityStatus.EAGER_TWO_RUNS_DIFFER
    else:
        result.status = ParityStatus.PASS
    if failed:
        result.notes.append(f"{len(failed)} check(s) outside tolerance; first: {failed[0].name}")
    if result.deterministic is False:
        result.notes.append(f"the reference is not deterministic: two runs differ first at {determinism.first_difference}")
    if failed and result.first_divergent_module is not None:
        m = result.first_divergent_module
        result.notes.append(f"first divergent module: {m.name} ({describe(m)})")
    return result


# -- unchanged scripts: convergence curves and final parameters (docs/check/parity.md, "Unchanged scripts") ----------
BAND_FACTOR = 3.0


@dataclass(frozen=True, kw_only=True)
class FinalParameters(Record):
    """The final parameters of one optimizer that stepped in a script: each tensor's digest (and name, where the
    recorder found the module that owns it)."""

    count: int
    numel: int
    digests: list[str]
    names: list[str] | None = None

    @classmethod
    def of(cls, params: list) -> FinalParameters:
        from torchferry.harness.portable import digest

        return cls(count=len(params), numel=sum(int(p.numel()) for p in params), digests=[digest(p) for p in params])


@dataclass(frozen=True, kw_only=True)
class Curves(Record):
    """What parity reads of one script run: its losses, gradient norms, optimizer steps and final parameters."""

    losses: list[float]
    grad_norms: list[float | None]
    steps: int
    parameters: list[FinalParameters]
    tensors: str | None = None  # the final parameters' tensors (one list per optimizer), when they were kept
    shapes: list[list] | None = None  # the tensors the first backward's graph saved: [node, attribute, shape]


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


def shape_difference(ref: list[list] | None, target: list[list] | None) -> str | None:
    """How the tensors of the first backward differ in shape between two runs (None when they do not, or when a
    run did not record them): the exact rule needs the same kernels on the same shapes."""
    from collections import Counter

    if not ref or not target:
        return None
    only_ref = Counter(map(tuple, (x[:2] + [tuple(x[2])] for x in ref)))
    only_target = Counter(map(tuple, (x[:2] + [tuple(x[2])] for x in target)))
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


def judge_script(ref: Curves, again: Curves | None, target: Curves, exact: bool, tolerance: Tolerance) -> ParityResult:
    """The parity result of a script's runs (the reference, its repeat, the target)."""
    rule = ("exact (same kernels)" if exact else
            f"band: max({BAND_FACTOR:g} x the reference's largest seed-to-seed spread, tol x max(1, |ref|))")
    result = ParityResult(tolerance={**tolerance.described(), "rule": rule})
    tol = tolerance.tol
    losses = curve("loss curve", ref.losses, target.losses, again.losses if again else None, exact, tol)
    result.loss_curve = losses
    failed = [] if losses["comparison"].passed else [losses["comparison"]]
    notes = []
    if ref.steps:
        norms = curve("gradient norm curve", ref.grad_norms, target.grad_norms, again.grad_norms if again else None,
                      exact, tol)
        result.gradients = [norms["comparison"]]
        result.grad_norm_curve = norms
        failed += [] if norms["comparison"].passed else [norms["comparison"]]
        params = _parameters(ref, target, exact, tol)
        if params is not None:
            result.outputs = [params]
            failed += [] if params.passed else [params]
    else:
        notes.append("the script made no optimizer step: parity is judged on the losses it recorded only")
    if ref.steps != target.steps:
        notes.append(f"the reference made {ref.steps} optimizer steps, the target {target.steps}")
        failed.append(Comparison("optimizer steps", False, ComparisonStatus.FAIL_SHAPE))
    if any(c.status == ComparisonStatus.NON_FINITE for c in failed):
        result.status = ParityStatus.NON_FINITE
        step = next((i for i, v in enumerate(target.losses) if v is None or not math.isfinite(v)), None)
        notes.insert(0, f"the target's loss is non-finite from backward call {step + 1 if step is not None else '?'} "
                        f"(loss {target.losses[step] if step is not None else '?'}) where the reference's is finite")
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


def _parameters(ref: Curves, target: Curves, exact: bool, tol: float) -> Comparison | None:
    """The final parameters: digests equal (exact), else cosine >= 1 - tol over all of them (band)."""
    a, b = ref.parameters, target.parameters
    if not a or not b:
        return None
    numel = sum(p.numel for p in b)
    if [p.count for p in a] != [p.count for p in b]:
        return Comparison("final parameters", False, ComparisonStatus.FAIL_SHAPE, numel=numel)
    if exact or not (ref.tensors and target.tensors):
        same = [p.digests for p in a] == [p.digests for p in b]
        return Comparison("final parameters", same, ComparisonStatus.PASS_ALLCLOSE if same else ComparisonStatus.FAIL_ACCURACY,
                          tol=0.0, allclose=same, numel=numel)
    import torch

    rs, ts = torch.load(ref.tensors, weights_only=True), torch.load(target.tensors, weights_only=True)
    r = torch.cat([t.double().flatten() for group in rs for t in group])
    t = torch.cat([x.double().flatten() for group in ts for x in group])
    if r.shape != t.shape or not bool(torch.isfinite(t).all()):
        return Comparison("final parameters", False, ComparisonStatus.NON_FINITE if r.shape == t.shape else
                          ComparisonStatus.FAIL_SHAPE, numel=numel)
    cosine = float(torch.nn.functional.cosine_similarity(r, t, dim=0))
    passed = cosine >= 1 - tol
    return Comparison("final parameters", passed, ComparisonStatus.PASS if passed else ComparisonStatus.FAIL_ACCURACY,
                      tol=tol, allclose=bool(torch.allclose(t, r, atol=tol, rtol=tol)), cosine=cosine,
                      max_abs_diff=float((t - r).abs().max()), numel=numel)
