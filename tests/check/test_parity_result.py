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


def _trained(buffers: dict) -> Capture:
    x = torch.ones(4)
    return Capture(run=RunCapture(grads={"w": torch.ones(3)}, losses=[1.0, 0.5], buffers=buffers),
                   probe=ProbeCapture(outputs={"out": x}, modules={"m": x}))


def test_a_buffer_the_target_did_not_update_fails_parity_by_name():
    """Training-mode BatchNorm statistics that stay at their initial values (TorchNeuron's CPU fallback for
    native_batch_norm) leave every loss and gradient equal: only the final buffers show it."""
    moved = {"bn.running_mean": torch.tensor([0.3, -0.2]), "bn.running_var": torch.tensor([1.4, 0.8])}
    ref = _trained(moved)
    ref.golden = _trained({k: v.double() for k, v in moved.items()})
    frozen = _trained({"bn.running_mean": torch.zeros(2), "bn.running_var": torch.ones(2)})
    result = parity.judge(Mode.TRAIN, Tolerance.resolve(Mode.TRAIN, "float32"), ref, frozen, None)
    assert result.status == "fail_accuracy"
    assert [c.name for c in result.outputs if not c.passed] == ["final buffer bn.running_mean",
                                                                "final buffer bn.running_var"]
    same = parity.judge(Mode.TRAIN, Tolerance.resolve(Mode.TRAIN, "float32"), ref, _trained(dict(moved)), None)
    assert same.status == "pass" and any(c.name == "final buffer bn.running_var" and c.passed for c in same.outputs)


def test_two_reference_runs_whose_buffers_differ_are_not_deterministic():
    a, b = _trained({"bn.running_mean": torch.zeros(2)}), _trained({"bn.running_mean": torch.ones(2)})
    determinism = parity.compare_runs(a.run, b.run, a.probe, b.probe)
    assert not determinism.deterministic and determinism.first_difference == "final buffer bn.running_mean"
