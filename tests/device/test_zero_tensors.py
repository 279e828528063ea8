"""Tensors without device bytes: efficient zero tensors, zero-size tensors, empty storages.

PyTorch makes some tensors whose data pointer is null (or points at no bytes of their own):
an efficient zero tensor (`torch._efficientzerotensor`, which autograd uses for gradients
it knows are zero, e.g. `sgn`'s) has a storage of its size but no bytes; its ZeroTensor
dispatch key makes every read see zeros. A zero-size tensor has no bytes at all. Each
one the device's factories can produce must read, print, copy and compute as on the CPU.
Before the fix the device dropped the ZeroTensor key when it re-wrapped a CPU kernel's
result, so reading an efficient zero tensor dereferenced a null pointer (SIGSEGV).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytestmark = pytest.mark.timeout(120)


def test_sgn_backward_does_not_crash(run_python):
    # In a fresh interpreter: before the fix this killed the process with SIGSEGV.
    result = run_python(
        """
        import warnings; warnings.simplefilter("ignore")
        import torch, torchferry.device
        torchferry.device.enable()
        x = torch.randn(5, dtype=torch.float64, device="neuron", requires_grad=True)
        torch.sgn(x).sum().backward()
        print(x.grad.cpu().tolist(), x.grad.device)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[0.0, 0.0, 0.0, 0.0, 0.0] neuron:0"


def test_efficient_zero_tensor_reads_prints_copies_and_adds(neuron):
    import torch

    z = torch._efficientzerotensor(5, device="neuron")
    assert z._is_zerotensor() and z.device.type == "neuron"
    assert z.cpu().tolist() == [0.0] * 5
    assert repr(z) == "tensor([0., 0., 0., 0., 0.], device='neuron:0')"
    assert z.clone().cpu().tolist() == [0.0] * 5 and not z.clone()._is_zerotensor()
    target = torch.ones(5, device="neuron")
    target.copy_(z)
    assert target.cpu().tolist() == [0.0] * 5
    assert (z + 1).cpu().tolist() == [1.0] * 5
    assert z[1:]._is_zerotensor() and z[1:].cpu().tolist() == [0.0] * 4  # views keep the key
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):  # as on the CPU
        z.add_(1)


def _factories() -> dict[str, Callable[[str], object]]:
    """Every way the device's factories give a tensor with a null or foreign data pointer."""
    import torch

    def grad_of_sgn(device: str) -> torch.Tensor:
        x = torch.ones(3, dtype=torch.float64, device=device, requires_grad=True)
        torch.sgn(x).sum().backward()
        return x.grad

    return {
        "empty with zero elements": lambda d: torch.empty(0, device=d),
        "empty (0, 3)": lambda d: torch.empty((0, 3), device=d),
        "empty_strided (0, 2)": lambda d: torch.empty_strided((0, 2), (2, 1), device=d),
        "new_empty zero-size": lambda d: torch.ones(2, device=d).new_empty((0,)),
        "zero-size moved from the CPU": lambda d: torch.zeros(0, 4).to(d),
        "resized to zero": lambda d: torch.ones(4, device=d).resize_(0),
        "set_ onto an empty storage": lambda d: torch.empty(3, device=d).set_(torch.UntypedStorage(0, device=d)),
        "offset view of an empty tensor": lambda d: torch.empty(0, device=d).as_strided((0,), (1,), 3),
        "efficient zero tensor": lambda d: torch._efficientzerotensor((2, 3), device=d),
        "view of an efficient zero tensor": lambda d: torch._efficientzerotensor((2, 3), device=d)[1:].t(),
        "gradient of sgn (an efficient zero)": grad_of_sgn,
    }


@pytest.mark.parametrize("name", list(_factories()))
def test_tensors_without_bytes_are_safe_to_read_print_and_copy(neuron, name):
    import torch

    make = _factories()[name]
    on_device, on_cpu = make("neuron"), make("cpu")
    assert on_device.device.type == "neuron"
    assert on_device.shape == on_cpu.shape and on_device.dtype == on_cpu.dtype
    torch.testing.assert_close(on_device.cpu(), on_cpu)  # read
    assert repr(on_device) == repr(on_cpu.clone().to("neuron"))  # print: as an ordinary device tensor
    torch.testing.assert_close(on_device.clone().cpu(), on_cpu)  # copy on the device
    fresh = torch.full(on_device.shape, 7.0, dtype=on_device.dtype, device="neuron")
    fresh.copy_(on_device)
    torch.testing.assert_close(fresh.cpu(), on_cpu)
    torch.testing.assert_close((on_device + 1).cpu(), on_cpu + 1)
    torch.testing.assert_close(on_device.sum().cpu(), on_cpu.sum())
