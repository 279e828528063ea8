"""Which thread runs a device backward, and the intra-op thread count it runs with.

PyTorch runs the backward of accelerator tensors on the autograd engine's device thread; the
CPU's runs on the calling thread. On this device that thread runs CPU kernels and brings a
second OpenMP team, which makes libgomp's workers sleep between parallel regions on every
thread (docs/device/architecture.md, "The backward thread"). So the device runs its backward
on the calling thread unless TORCHFERRY_BACKWARD_THREAD=device or the user turns PyTorch's
multithreaded backward back on. Where the device thread runs it, it must follow
`torch.set_num_threads`, or its reductions split differently from the CPU's and the two
devices' gradients stop being bitwise equal.
"""

import threading

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


def backward_thread_id() -> int:
    w = torch.ones(2, device="neuron", requires_grad=True)
    seen: list[int] = []
    w.register_hook(lambda g: seen.append(threading.get_ident()))
    (w * 2).sum().backward()
    return seen[0]


@pytest.mark.timeout(60)
def test_device_backward_runs_on_the_calling_thread(neuron):
    torch.ones(1, device="neuron").add_(1)  # this thread's first device op (if it is one) chooses
    assert not torch.autograd.is_multithreading_enabled()
    assert backward_thread_id() == threading.get_ident()
    # The user's own switch wins after that: PyTorch's device thread runs it.
    with torch.autograd.set_multithreading_enabled(True):
        assert backward_thread_id() != threading.get_ident()


@pytest.mark.timeout(60)
def test_every_thread_that_runs_device_ops_keeps_its_backward(neuron):
    ids: list[tuple[int, int]] = []
    worker = threading.Thread(target=lambda: ids.append((backward_thread_id(), threading.get_ident())))
    worker.start()
    worker.join()
    (hook_thread, worker_thread), = ids
    assert hook_thread == worker_thread


def test_the_device_thread_can_be_kept(run_python):
    result = run_python(
        """
        import threading
        import torchferry.device as d; d.enable()
        import torch
        w = torch.ones(2, device="neuron", requires_grad=True)
        seen = []
        w.register_hook(lambda g: seen.append(threading.get_ident()))
        (w * 2).sum().backward()
        print(torch.autograd.is_multithreading_enabled(), seen[0] != threading.get_ident())
        """,
        env={"TORCHFERRY_BACKWARD_THREAD": "device"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


@pytest.mark.timeout(60)
def test_the_device_thread_follows_set_num_threads(neuron):
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    with torch.autograd.set_multithreading_enabled(True):  # the engine's device thread runs the backward
        grad_and_threads("neuron")  # the device thread now exists, started at `before`
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
