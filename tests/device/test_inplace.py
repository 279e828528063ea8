"""In-place and `out=` ops on the device keep the CPU's rules.

The device runs an op on the CPU kernel over host views of its tensors. When one tensor is
passed twice (`x.ldexp_(y)` is `mul.out(x, 2**y, out=x)`), the kernel must see one tensor,
or it cannot tell that the output is also an input: it then resizes the output to the
broadcast shape and an in-place op changes its self's shape (x of shape (5, 1) became
(5, 5)), where the CPU raises.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytestmark = pytest.mark.timeout(120)


def _cases() -> dict[str, Callable]:
    import torch

    return {
        "ldexp_": lambda x, y: x.ldexp_(y),
        "mul_": lambda x, y: x.mul_(y),
        "add out=self": lambda x, y: torch.add(x, y, out=x),
        "mul out=self": lambda x, y: torch.mul(x, y, out=x),
        "atan2 out=self": lambda x, y: torch.atan2(x, y, out=x),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_an_in_place_op_never_changes_its_selfs_shape(rules, name):
    """With the compiled_out_written_after rule off: with it, an op TorchNeuron compiles resizes its out=
    with a plain resize_, as there (the test below)."""
    import torch

    rules(compiled_out_written_after=False)
    op = _cases()[name]
    with pytest.raises(RuntimeError) as on_cpu:
        op(torch.ones(5, 1), torch.ones(5))
    x = torch.ones(5, 1, device="neuron")
    with pytest.raises(RuntimeError) as on_device:
        op(x, torch.ones(5, device="neuron"))
    assert str(on_device.value) == str(on_cpu.value)  # "output with shape [5, 1] doesn't match ..."
    assert x.shape == (5, 1) and torch.equal(x.cpu(), torch.ones(5, 1))


def test_an_out_tensor_that_is_not_an_input_is_still_resized(neuron):
    import torch

    out = torch.empty(0, device="neuron")
    torch.mul(torch.ones(5, 1, device="neuron"), torch.full((5,), 2.0, device="neuron"), out=out)
    assert out.shape == (5, 5) and torch.equal(out.cpu(), torch.full((5, 5), 2.0))


def test_the_same_tensor_twice_as_input_computes_as_on_the_cpu(neuron):
    import torch

    x = torch.arange(6.0).reshape(2, 3)
    on_device = x.to("neuron")
    on_device.addcmul_(on_device, on_device, value=0.5)
    assert torch.equal(on_device.cpu(), x.clone().addcmul_(x, x, value=0.5))


@pytest.mark.parametrize("name", ["add out=self", "mul out=self"])
def test_an_out_that_is_also_an_input_is_resized_to_the_result_as_torchneuron_does(neuron, name):
    """TorchNeuron resizes a compiled op's out= to the result's shape with a plain resize_, before or after
    its kernel (python_ops/base.py _resize_output_if_needed, torch_mlir/kernel.py _prepare_execution_tensors),
    also when out= is an input: no error there, where the CPU raises (the compiled_out_written_after rule)."""
    import torch

    x = torch.ones(5, 1, device="neuron")
    _cases()[name](x, torch.ones(5, device="neuron"))
    assert x.shape == (5, 5)
