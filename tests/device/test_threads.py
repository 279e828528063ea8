"""The intra-op thread count of the autograd engine's device thread follows the process's.

PyTorch runs the backward of `neuron` tensors on the engine's device thread, which sets its
intra-op (OpenMP) count once, when it starts; the CPU's backward runs on the calling thread.
After a `torch.set_num_threads`, the device must take the new count too, or its reductions
split differently from the CPU's and the two devices' gradients stop being bitwise equal.
"""

import pytest
import torch

# 2**20 summands: a sum this long is split across threads, so 1 and 2 threads round it
# differently (checked on the CPU in the test itself).
VALUES = torch.randn(1 << 20, generator=torch.Generator().manual_seed(3))


def grad_and_threads(device: str) -> tuple[torch.Tensor, int]:
    """The gradient of a long sum and the intra-op count of the thread that ran its backward."""
    w = torch.ones(1, device=device, requires_grad=True)
    seen: list[int] = []
    w.register_hook(lambda g: seen.append(torch.get_num_threads()))  # runs on the backward's thread
    (VALUES.to(device) * w).sum().backward()
    return w.grad.cpu(), seen[0]


@pytest.mark.timeout(60)
def test_device_backward_follows_set_num_threads(neuron):
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    grad_and_threads("neuron")  # the engine's device thread now exists, started at `before`
    try:
        torch.set_num_threads(other)
        cpu_grad, cpu_threads = grad_and_threads("cpu")
        dev_grad, dev_threads = grad_and_threads("neuron")
        torch.set_num_threads(before)
        cpu_before, _ = grad_and_threads("cpu")
        _, dev_back = grad_and_threads("neuron")
    finally:
        torch.set_num_threads(before)
    assert (cpu_threads, dev_threads, dev_back) == (other, other, before)
    # The check below can fail only if thread counts change the sum's rounding.
    assert not torch.equal(cpu_grad, cpu_before), "1 and 2 threads sum alike here: the test proves nothing"
    assert torch.equal(dev_grad, cpu_grad)
