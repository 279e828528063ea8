"""Zero-copy execution on the CPU kernels: views alias, in-place and out= mutate device
memory (also when the kernel resizes `out`), and results are adopted without a copy."""

import pytest
import torch


def test_results_are_adopted_without_a_copy(neuron):
    a = torch.randn(1000, device="neuron")
    b = torch.randn(1000, device="neuron")
    allocs = neuron.memory_stats()["allocation.all.allocated"]
    c = a + b
    # Exactly one new device allocation (the CPU kernel's output), no staging copy.
    assert neuron.memory_stats()["allocation.all.allocated"] == allocs + 1
    assert c.device.type == "neuron"
    assert torch.equal(c.cpu(), a.cpu() + b.cpu())


def test_view_ops_alias_device_memory(neuron):
    x = torch.arange(12.0, device="neuron")
    v = x.view(3, 4).t()
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    v[0, 0] = 100.0
    assert x[0].item() == 100.0
    parts = x.split(4)
    assert all(p.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for p in parts)


def test_in_place_ops_mutate_device_memory(neuron):
    x = torch.zeros(4, device="neuron")
    ptr = x.data_ptr()
    y = x.add_(3)
    assert y is x and x.data_ptr() == ptr
    assert x.cpu().tolist() == [3.0] * 4


def test_out_variant_writes_into_the_device_tensor(neuron):
    out = torch.empty(4, device="neuron")
    ptr = out.data_ptr()
    torch.add(torch.ones(4, device="neuron"), 1, out=out)
    assert out.data_ptr() == ptr and out.cpu().tolist() == [2.0] * 4


def test_out_variant_resized_by_the_cpu_kernel_updates_shape_and_bytes(neuron):
    out = torch.empty(0, device="neuron")
    torch.mm(torch.ones(3, 2, device="neuron"), torch.ones(2, 5, device="neuron"), out=out)
    assert out.shape == (3, 5) and out.device.type == "neuron"
    assert out.cpu().eq(2).all()
    assert out.untyped_storage().device.type == "neuron"
    assert out.untyped_storage().nbytes() == 3 * 5 * 4


def test_resize_in_place_keeps_data_and_device(neuron):
    x = torch.arange(4.0, device="neuron")
    x.resize_(8)
    assert x.shape == (8,) and x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert x.untyped_storage().device.type == "neuron"


def test_copies_between_host_and_device_and_item(neuron):
    host = torch.randn(5, 7)
    dev = host.to("neuron")
    assert dev.device == torch.device("neuron", 0)
    assert torch.equal(dev.cpu(), host)
    assert dev.sum().item() == pytest.approx(host.sum().item())
    other = torch.empty(5, 7, device="neuron")
    other.copy_(dev)
    assert torch.equal(other.cpu(), host)
    transposed = torch.empty(7, 5).t()
    transposed.copy_(dev)  # device -> host into a strided destination
    assert torch.equal(transposed, host)


def test_mixed_cpu_scalar_and_device_tensor(neuron):
    x = torch.ones(3, device="neuron")
    y = x * torch.tensor(2.0)  # 0-dim CPU tensors may join device ops, as on CUDA
    assert y.device.type == "neuron" and y.cpu().tolist() == [2.0] * 3


def test_tensor_lists_and_optional_tensor_lists(neuron):
    xs = [torch.ones(2, device="neuron") for _ in range(3)]
    torch._foreach_add_(xs, 1.0)
    assert all(x.cpu().tolist() == [2.0, 2.0] for x in xs)
    base = torch.arange(10.0, device="neuron")
    idx = torch.tensor([1, 3], device="neuron")
    assert base[idx].cpu().tolist() == [1.0, 3.0]
    base.index_put_((idx,), torch.zeros(2, device="neuron"))
    assert base.cpu()[[1, 3]].tolist() == [0.0, 0.0]


def test_device_to_device_copy_across_indices(run_python):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        a = torch.arange(4.0, device="neuron:0")
        b = a.to("neuron:1")
        c = b * 2
        print(b.device, c.device, c.cpu().tolist(), torch.neuron.memory_allocated(1) > 0)
        with torch.neuron.device(1):
            print(torch.empty(1, device="neuron").device)
        """,
        env={"NEURON_RT_VISIBLE_CORES": "0-1"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "neuron:1 neuron:1 [0.0, 2.0, 4.0, 6.0] True"
    assert lines[1] == "neuron:1"


def test_lazily_conjugated_and_negated_views_copy_off_the_device(neuron):
    # The Conjugate/Negative fallbacks must let `_copy_from` handle the bits itself;
    # materialising first recursed without end (a stack overflow) before.
    x = torch.randn(4, dtype=torch.complex64)
    dev = x.to("neuron")
    assert torch.equal(dev.conj().cpu(), x.conj())
    assert torch.equal(dev.conj().clone().cpu(), x.conj())
    assert torch.equal(torch._neg_view(dev).cpu(), -x)
    into = torch.empty(4, dtype=torch.complex64, device="neuron")
    into.copy_(x.conj())
    assert torch.equal(into.cpu(), x.conj())


def test_empty_strided_with_sizes_and_strides_of_other_lengths_raises_as_the_cpu_and_torchneuron_do(neuron):
    # PyTorch's test_new_empty_strided expects this error (it passes on Trainium): no silent contiguous tensor
    import torch

    x = torch.tensor(-4.827, dtype=torch.float64, device="neuron")
    for make in (lambda: x.new_empty_strided((2,), ()), lambda: torch.empty_strided((1,), (), device="neuron"),
                 lambda: torch.empty_strided((1, 2), (1,), device="neuron")):
        with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(\d\) must match dimensionality of strides"):
            make()
    twin = torch.empty_strided((2, 3), (1, 2), device="neuron")  # lengths that match: the strides as given
    assert twin.shape == (2, 3) and twin.stride() == (1, 2)
    assert torch.empty_strided((), (), device="neuron").dim() == 0
