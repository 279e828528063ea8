"""The parity result of `ferry check`: captured in each worker, judged in the parent by the harness's parity rule.

``capture`` is the worker's half: the timed run's capture and its probe; on the reference also a second
run (the determinism check) and the float64 golden run. ``judge`` is the parent's. The rule itself (per
tensor, fp64-relative, and per-module localisation) lives in torchferry.harness.parity; this module
assembles check's result from it: outputs, gradients (a gradient missing on the target fails), the
model's buffers after training, the loss curve, generated tokens, the determinism of the reference and
the first divergent module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchferry.harness.case import Capture, ModelCase, ProbeCapture, RunCapture
from torchferry.harness.modes import Mode
from torchferry.harness.parity import Tolerance, compare, compare_dicts, compare_tokens, localise
from torchferry.records import Record
from torchferry.report.check import ParityResult, ParityStatus
from torchferry.report.comparison import FINAL_BUFFER, Comparison, ComparisonStatus, describe


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
    pairs += [(f"{FINAL_BUFFER} {k}", v, b.buffers[k]) for k, v in a.buffers.items()]
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
        buffers = compare_dicts(f"{FINAL_BUFFER} ", ref.run.buffers, target.run.buffers, golden.run.buffers, tol, low)
        result.outputs += buffers
        failed += [c for c in buffers if not c.passed]
        losses = {k: v.run.losses for k, v in (("ref", ref), ("target", target), ("fp64", golden))}
        curve = compare("loss curve", torch.tensor(losses["ref"]), torch.tensor(losses["target"]),
                        torch.tensor(losses["fp64"]), tol, low)
        result.loss_curve = {**losses, "comparison": curve}
        failed += [] if curve.passed else [curve]
    if mode == Mode.GENERATE:
        comparison, result.tokens = compare_tokens(ref.run.tokens, target.run.tokens, golden.run.tokens)
        failed += [] if comparison.passed else [comparison]
        if comparison.passed and not result.tokens["match"]:
            result.notes.append(f"generated tokens differ from index {result.tokens['first_mismatch']}: {comparison.note}")
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
