"""Target numerics: on ops TorchNeuron runs natively, int64 computes as int32 and float64
as float32 (torch_neuronx/kernels/type_converter.py), results keep their 64-bit dtype;
ops it runs on the CPU keep 64 bits; float32 stays the CPU's bit for bit."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.timeout(120)


def hashed_ids(device: str) -> torch.Tensor:
    """A workload whose int64 arithmetic leaves the 32-bit range: hashing token ids."""
    ids = torch.arange(1, 9, dtype=torch.int64, device=device)
    return (ids * 1_000_000_007 + 12_345) % 2**40


def test_int64_overflowing_32_bits_fails_parity_under_target_numerics(numerics):
    numerics("target")
    got = hashed_ids("neuron")
    assert got.dtype == torch.int64
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got.cpu(), hashed_ids("cpu"), rtol=0, atol=0)


def test_int64_matches_the_cpu_under_host_numerics(numerics):
    numerics("host")
    torch.testing.assert_close(hashed_ids("neuron").cpu(), hashed_ids("cpu"), rtol=0, atol=0)


def test_int64_wraps_as_int32_does(numerics):
    numerics("target")
    x = torch.tensor([2**31 - 1, 5], dtype=torch.int64, device="neuron")
    assert (x + 1).cpu().tolist() == [-(2**31), 6]
    x.add_(1)  # in place: the result lands in the int64 tensor, wrapped
    assert x.dtype == torch.int64 and x.cpu().tolist() == [-(2**31), 6]
    assert (x.to(torch.int32) == torch.tensor([-(2**31), 6], dtype=torch.int32, device="neuron")).all().item()


def test_float64_carries_float32_precision_and_range(numerics):
    numerics("target")
    x = torch.tensor([1 / 3, 1e39], dtype=torch.float64, device="neuron")
    y = x * 1.0
    assert y.dtype == torch.float64
    third = float(torch.tensor(1 / 3, dtype=torch.float32))
    assert y.cpu().tolist() == [third, float("inf")]
    numerics("host")
    assert (x * 1.0).cpu().tolist() == [1 / 3, 1e39]


def test_a_float_scalar_of_a_float64_op_computes_as_the_float32_torchneuron_passes(numerics):
    """TorchNeuron passes a float scalar as a float32 tensor (processors/argument_processor.py):
    7 * (1/3) is then float32(7 * float32(1/3)) = 2.3333335, where a 64-bit scalar rounds to 2.3333333.
    A float32 operand is the CPU's either way, and host numerics keep 64 bits."""
    numerics("target")
    seven = torch.tensor([7.0], dtype=torch.float64, device="neuron")
    as_float32 = torch.tensor([7.0], dtype=torch.float32) * torch.tensor(1 / 3, dtype=torch.float32)
    assert (seven * (1 / 3)).cpu().tolist() == as_float32.double().tolist() == [2.3333334922790527]
    assert torch.equal((seven.float() * (1 / 3)).cpu(), torch.tensor([7.0]) * (1 / 3))
    numerics("host")
    assert (seven * (1 / 3)).cpu().tolist() == [7 * (1 / 3)]


def test_copies_and_ops_the_target_runs_on_the_cpu_keep_64_bits(numerics):
    numerics("target")
    big = torch.tensor([2**40 + 3], dtype=torch.int64)
    on_device = big.to("neuron")  # a copy: exact, as TorchNeuron's 64-bit casts bounce through the CPU
    assert on_device.cpu().tolist() == [2**40 + 3] and on_device.item() == 2**40 + 3
    # cumprod is not implemented by TorchNeuron: it runs on the CPU, at 64 bits
    values = torch.tensor([2**20, 2**20, 3], dtype=torch.int64)
    assert torch.cumprod(values.to("neuron"), 0).cpu().tolist() == torch.cumprod(values, 0).tolist()


WIDE = torch.tensor([[2**40 + 3, 1, 2], [3, 4, 2**33 + 1]], dtype=torch.int64)
# The layouts TorchNeuron makes contiguous with a compiled kernel (python_ops/contiguous.py):
LAYOUT_KERNELS = {
    "transpose": lambda x: x.t(),
    "broadcast": lambda x: x[:, :1].expand(2, 3),
    "slice of one axis": lambda x: x[:, 1:],
}


@pytest.mark.parametrize("layout", LAYOUT_KERNELS)
def test_a_64_bit_tensor_made_contiguous_by_a_compiled_layout_kernel_takes_32_bit_values(numerics, layout):
    """TorchNeuron's contiguous_internal makes a transposed, broadcast or sliced tensor contiguous
    with a torch-mlir program (its float64 lowered as float32): .contiguous(), .cpu() and a copy
    into a contiguous device tensor of a 64-bit one give 32-bit values; host numerics keep 64 bits."""
    view = LAYOUT_KERNELS[layout]
    expected = view(WIDE).to(torch.int32).to(torch.int64)
    assert not torch.equal(expected, view(WIDE)), "the layout must hold a value beyond int32"
    numerics("target")
    on_device = view(WIDE.to("neuron"))
    assert not on_device.is_contiguous()
    assert torch.equal(on_device.cpu(), expected)
    assert torch.equal(on_device.contiguous().cpu(), expected)
    into = torch.empty(on_device.shape, dtype=torch.int64, device="neuron")
    assert torch.equal(into.copy_(on_device).cpu(), expected)
    doubles = torch.tensor([[1 / 3, 2.0, 3.0], [4.0, 5.0, 1 / 7]], dtype=torch.float64)
    assert torch.equal(view(doubles.to("neuron")).cpu(), view(doubles).float().double())
    numerics("host")
    assert torch.equal(view(WIDE.to("neuron")).cpu(), view(WIDE))


def test_64_bit_copies_the_compiled_layout_kernels_do_not_make_keep_64_bits(numerics):
    """A contiguous tensor is copied byte for byte, and a layout none of the three kernels takes
    (a slice of two axes) goes to TorchNeuron's NKI kernel, which keeps the dtype."""
    numerics("target")
    on_device = WIDE.to("neuron")
    assert torch.equal(on_device.cpu(), WIDE) and torch.equal(on_device.contiguous().cpu(), WIDE)
    two_axes = torch.cat([WIDE, WIDE]).to("neuron")[::2, ::2]
    assert torch.equal(two_axes.cpu(), torch.cat([WIDE, WIDE])[::2, ::2])
    assert torch.equal(two_axes.contiguous().cpu(), torch.cat([WIDE, WIDE])[::2, ::2])


def test_float32_results_are_the_cpus_bit_for_bit(numerics):
    numerics("target")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    for op in (lambda x, y: x @ y, lambda x, y: torch.softmax(x @ y, -1), lambda x, y: (x @ y).exp().sum(0)):
        assert torch.equal(op(a.to("neuron"), b.to("neuron")).cpu(), op(a, b))


def test_memory_keeps_8_bytes_per_64_bit_element(numerics):
    # TorchNeuron allocates outputs in their original dtype and casts the 32-bit result back.
    numerics("target")
    x = torch.ones(1024, dtype=torch.int64, device="neuron")
    before = torch.neuron.memory_allocated()
    y = x + 1
    assert y.element_size() == 8
    assert torch.neuron.memory_allocated() - before >= 8 * 1024


def test_numerics_from_the_environment(run_python):
    code = """
        import torchferry.device as d; d.enable()
        import torch
        print((torch.tensor([2**31 - 1], device="neuron") + 1).item())
    """
    assert run_python(code).stdout.split() == [str(-(2**31))]
    assert run_python(code, env={"TORCHFERRY_NUMERICS": "host"}).stdout.split() == [str(2**31)]


def test_unknown_numerics_value_lists_the_valid_ones(run_python):
    result = run_python("import torchferry.device as d; d.enable()", env={"TORCHFERRY_NUMERICS": "exact"})
    assert result.returncode != 0
    assert "TORCHFERRY_NUMERICS='exact' is not a numerics mode. Valid values: target, host" in result.stderr
