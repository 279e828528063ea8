"""Ops TorchNeuron registers natively that PyTorch implements as composites run as one device op:
counted once under their own name (executed ops, fallbacks, profiler), with the CPU's values.
CompositeImplicitAutograd ones (`linear`, `one_hot`) are tested in test_target_rules.py; these are
the CompositeExplicitAutograd ones (`_foreach_*`, `stack`, ...), the profile table's exact overload
names, and the ops left to PyTorch's composite."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torchferry.device import _runtime
from torchferry.device.profile import load_profile


@pytest.fixture
def tracked(neuron):
    neuron.clear_op_tracking()
    return neuron


def test_a_foreach_op_counts_once_as_itself_with_the_cpus_values(tracked):
    params = [torch.randn(3, 2), torch.randn(5), torch.randn(())]
    on_device = [p.to("neuron") for p in params]
    tracked.clear_op_tracking()
    torch._foreach_add_(on_device, 0.5)
    assert tracked.get_executed_ops() == {"aten::_foreach_add_.Scalar": 1}
    assert tracked.get_fallback_ops() == {}
    torch._foreach_add_(params, 0.5)
    assert all(torch.equal(d.cpu(), p) for d, p in zip(on_device, params))


def test_a_foreach_update_after_inference_mode_work_runs_with_the_cpus_values(neuron):
    # The thread's host views are reused across ops; one made under InferenceMode is an
    # inference tensor, which a composite's in-place parts refuse outside it ("Inplace update to
    # inference tensor outside InferenceMode"): ferry check's AdamW step after an eval pass.
    params = [torch.randn(4, 4) for _ in range(3)]
    on_device = [p.to("neuron") for p in params]
    with torch.inference_mode():
        x = torch.randn(4, 4, device="neuron")
        torch.cat([x * 2, x]).sum()
    torch._foreach_mul_(on_device, 0.5)
    torch._foreach_mul_(params, 0.5)
    assert all(torch.equal(d.cpu(), p) for d, p in zip(on_device, params))


def test_a_foreach_op_is_one_device_event_in_the_profiler(neuron):
    on_device = [torch.randn(4, device="neuron") for _ in range(3)]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch._foreach_mul_(on_device, 2.0)
    device = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert device == ["aten::_foreach_mul_.Scalar"]


def test_max_of_two_tensors_is_the_maximum_the_target_runs_not_a_max_other_fallback(tracked):
    # The table's `aten::max` is the overload max(Tensor); TorchNeuron registers neither `max.other`
    # nor `maximum` (python_ops/torch_mlir/ops/reduction.py), so PyTorch decomposes max.other into
    # maximum there too, which then runs wherever the profile says.
    a, b = torch.randn(5), torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_device = torch.max(a.to("neuron"), b.to("neuron"))
    counted = {**tracked.get_executed_ops(), **tracked.get_fallback_ops()}
    assert "aten::max.other" not in counted
    assert counted.get("aten::maximum") == 1
    in_fallbacks = "aten::maximum" in tracked.get_fallback_ops()
    assert in_fallbacks == (load_profile("trn2").host_reason("aten::maximum") is not None)
    assert torch.equal(on_device.cpu(), torch.max(a, b))


def test_a_composite_explicit_op_gives_the_cpus_values_and_gradients(tracked):
    x = torch.randn(3, 4, requires_grad=True)
    on_device = x.detach().to("neuron").requires_grad_()
    tracked.clear_op_tracking()
    out = torch.nn.functional.pad(torch.stack([on_device, on_device * 2]), (1, 2))
    executed = tracked.get_executed_ops()
    assert executed.get("aten::stack") == 1 and executed.get("aten::constant_pad_nd") == 1
    assert "aten::cat" not in executed, "stack is counted as itself, not as the cat it is made of"
    (out * out).sum().backward()  # PyTorch's formulas: pad's backward is a pad, stack's an unbind
    expected = torch.nn.functional.pad(torch.stack([x, x * 2]), (1, 2))
    (expected * expected).sum().backward()
    assert torch.equal(out.detach().cpu(), expected.detach())
    assert torch.equal(on_device.grad.cpu(), x.grad)


def test_a_composite_explicit_op_not_in_the_native_table_still_runs_as_its_parts(tracked):
    on_device = [torch.rand(4, device="neuron") for _ in range(3)]
    tracked.clear_op_tracking()
    torch._foreach_sqrt_(on_device)  # TorchNeuron registers no _foreach_sqrt_
    executed = tracked.get_executed_ops()
    assert "aten::_foreach_sqrt_" not in executed
    assert executed.get("aten::sqrt_") == 3


def test_ops_whose_result_may_lie_on_another_device_keep_their_composite(neuron):
    x = torch.randn(3, device="neuron")
    assert x.new_empty(2, device="cpu").device.type == "cpu"
    assert torch.ones_like(x, device="cpu").device.type == "cpu"
    assert x.to("cpu").device.type == "cpu" and x.to(torch.float16).device.type == "neuron"


def test_the_table_is_read_by_exact_overload_and_copies_between_devices_are_left_alone(run_python):
    # In a fresh interpreter: once the device is enabled these ops have its kernels, and the
    # function leaves ops with a PrivateUse1 kernel alone.
    result = run_python(
        """
        import torch
        from torchferry.device import _runtime
        from torchferry.device.profile import load_profile
        composites = _runtime.native_composite_ops(torch, load_profile("trn2"))
        print(sorted(composites.implicit)); print(sorted(composites.explicit))
        """
    )
    assert result.returncode == 0, result.stderr
    implicit, explicit = (eval(line) for line in result.stdout.splitlines())
    assert "linear" in implicit and "_foreach_add_.Scalar" in explicit and "stack" in explicit
    assert not {"max.other", "min.other", "max.out", "min.out"} & set(implicit), "no overload the table does not name"
    assert not {"copy_", "_to_copy", "new_empty", "ones_like"} & set(explicit)


def test_explicit_composites_are_registered_below_autograd_only(neuron):
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("aten::_foreach_add_.Scalar", "PrivateUse1")
    assert not has("aten::_foreach_add_.Scalar", "AutogradPrivateUse1")
    assert has("aten::linear", "PrivateUse1") and has("aten::linear", "AutogradPrivateUse1")


def test_a_profile_without_a_native_table_registers_no_composites():
    chosen = dataclasses.replace(load_profile("trn2"), native_ops=None)
    assert _runtime.native_composite_ops(torch, chosen) == _runtime.NativeComposites()
