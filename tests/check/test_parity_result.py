"""check's parity result, assembled from the harness's rule: a gradient the target lacks fails."""

import torch

from torchferry.check import parity
from torchferry.harness.case import Capture, ProbeCapture, RunCapture
from torchferry.harness.modes import Mode
from torchferry.harness.parity import Tolerance


def _tensors(grads: dict) -> Capture:
    x = torch.ones(4)
    return Capture(run=RunCapture(grads=grads, losses=[1.0, 0.5]), probe=ProbeCapture(outputs={"out": x}, modules={"m": x}))


def test_a_gradient_missing_on_the_target_fails_parity():
    grads = {"a": torch.ones(3), "b": torch.ones(3)}
    ref = _tensors(grads)
    ref.golden = _tensors({k: v.double() for k, v in grads.items()})
    result = parity.judge(Mode.TRAIN, Tolerance.resolve(Mode.TRAIN, "float32"), ref, _tensors({"a": torch.ones(3)}), None)
    assert result.status == "fail_accuracy"
    missing = [g for g in result.gradients if g.status == "missing"]
    assert [g.name for g in missing] == ["grad b"] and not missing[0].passed
