"""Checkpoint recoverable: resume mid-training on the target in a fresh process and compare losses.

The target worker saves model, optimizer and RNG state after ``resume_step`` steps of its
primary run; a new target process loads it and finishes the run. The resumed loss curve
must match the uninterrupted one (allclose at the parity tolerance; exact equality reported).
``save`` and ``capture`` are the target worker's half, ``judge`` the parent's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.harness.case import ModelCase
from torchferry.records import Record
from torchferry.report.check import ResultStatus, ResumeResult

FOLDER = "resume"  # under the run's work folder


def checkpoint(workdir: Path) -> Path:
    """The mid-training checkpoint of a run whose work folder is ``workdir``."""
    return workdir / FOLDER / "checkpoint.pt"


@dataclass(frozen=True, kw_only=True)
class Resumed(Record):
    """The resumed run: the step its checkpoint was saved after, and its losses from there."""

    step: int
    losses: list[float]


# -- capture (the target's workers) --------------------------------------------------------------
def save(case: ModelCase, model: Any, opt: Any, step: int, workdir: Path) -> None:
    """The checkpoint after ``step`` steps: model, optimizer, the step and the generators' state."""
    import torch

    path = checkpoint(workdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "rng": case.rng_state()}, path)


def capture(case: ModelCase, workdir: Path) -> Resumed:
    """Fresh process: load the mid-training checkpoint on the target and finish the run."""
    import torch

    ckpt = torch.load(checkpoint(workdir), map_location=case.device, weights_only=True)
    model = case.fresh()
    model.load_state_dict(ckpt["model"])
    opt = case.optimizer(model)
    opt.load_state_dict(ckpt["optimizer"])
    case.set_rng_state(ckpt["rng"])
    return Resumed(step=ckpt["step"], losses=case.run(model, start=ckpt["step"], opt=opt)[0].losses)


# -- judge (the parent) ---------------------------------------------------------------------------
def judge(uninterrupted: list[float], resumed: Resumed, tol: float) -> ResumeResult:
    step = resumed.step
    expected, got = uninterrupted[step:], resumed.losses
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
