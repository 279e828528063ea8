"""Checkpoint recoverable: resume mid-training on the target in a fresh process and compare losses.

The target worker saves model, optimizer and RNG state after ``resume_step`` steps of its
primary run; a new target process loads it and finishes the run. The resumed loss curve
must match the uninterrupted one (allclose at the parity tolerance; exact equality reported).
"""

from __future__ import annotations

from torchferry.report.check import ResultStatus, ResumeResult


def judge(uninterrupted: list[float], resumed: dict, tol: float) -> ResumeResult:
    step = resumed["step"]
    expected, got = uninterrupted[step:], resumed["losses"]
    result = ResumeResult(saved_at_step=step, uninterrupted=expected, resumed=got)
    if len(expected) != len(got) or not got:
        result.status = ResultStatus.FAIL
        result.notes.append(f"resumed run has {len(got)} losses, the uninterrupted one {len(expected)} after step {step}")
        return result
    diffs = [abs(a - b) for a, b in zip(expected, got)]
    result.max_abs_diff, result.exact = max(diffs), all(d == 0 for d in diffs)
    close = all(d <= tol + tol * abs(a) for d, a in zip(diffs, expected))
    result.status = ResultStatus.PASS if close else ResultStatus.FAIL
    if not close:
        worst = diffs.index(result.max_abs_diff)
        result.notes.append(f"resumed loss leaves tolerance {tol:g} at step {step + worst + 1}: "
                            f"{got[worst]:.6g} vs {expected[worst]:.6g}")
    return result
