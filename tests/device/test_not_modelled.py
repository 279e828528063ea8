"""What the device does not model, and says so (docs/device/architecture.md, "What it does
not do"): each behaviour here is TorchNeuron's, with the source named in the docs."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)


def test_sparse_tensors_fail_at_the_first_op_with_the_way_out(neuron):
    import torch

    sparse = torch.eye(3).to_sparse()
    with pytest.raises(NotImplementedError, match="sparse tensors .* not supported on the neuron device.*to_dense"):
        sparse.to("neuron")
    with pytest.raises(RuntimeError, match="supports strided tensors only; the CPU kernel returned a Sparse"):
        torch.eye(3, device="neuron").to_sparse()


def test_storage_type_is_none_as_on_torchneuron(neuron):
    # PyTorch looks the legacy class up as torch.neuron.FloatStorage; TorchNeuron defines none.
    import torch

    assert torch.ones(2).storage_type() is torch.FloatStorage
    assert not hasattr(torch.neuron, "FloatStorage")
    assert torch.ones(2, device="neuron").storage_type() is None


def test_eval_batch_norm_saves_no_statistics_like_the_cpu(neuron):
    # The CPU kernel (TorchNeuron runs it too) returns [0]-shaped saved statistics in eval;
    # PyTorch's meta function gives [C] for non-CPU devices (see the docs).
    import torch

    args = [torch.randn(3, 2), torch.ones(2), torch.zeros(2), torch.zeros(2), torch.ones(2)]
    on_cpu = torch.native_batch_norm(*args, False, 0.1, 1e-5)
    on_device = torch.native_batch_norm(*[a.to("neuron") for a in args], False, 0.1, 1e-5)
    on_meta = torch.native_batch_norm(*[a.to("meta") for a in args], False, 0.1, 1e-5)
    assert [t.shape for t in on_device] == [t.shape for t in on_cpu] == [(3, 2), (0,), (0,)]
    assert [t.shape for t in on_meta] == [(3, 2), (2,), (2,)]
    torch.testing.assert_close(on_device[0].cpu(), on_cpu[0], rtol=0, atol=0)
