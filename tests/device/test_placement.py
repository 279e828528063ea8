"""Device placement as PyTorch defines it for accelerators: an op mixing `neuron` tensors
with tensors on another device raises, on every execution path; 0-dim CPU inputs, CPU
index tensors of advanced indexing and explicit copies stay allowed, as on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices, neuron:0 and cpu!"

pytestmark = pytest.mark.timeout(120)


def dev(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype, device="neuron")


MIXED = {
    "add": lambda: dev(3) + torch.ones(3),
    "add, CPU tensor first": lambda: torch.ones(3) + dev(3),
    "in-place mul_": lambda: dev(3).mul_(torch.ones(3)),
    "cat": lambda: torch.cat([dev(2), torch.ones(2)]),
    "linear": lambda: F.linear(torch.ones(2, 3), dev(4, 3)),
    "matmul": lambda: dev(2, 3) @ torch.ones(3, 2),
    "where": lambda: torch.where(dev(3) > 0, dev(3), torch.ones(3)),
    "embedding": lambda: F.embedding(torch.tensor([0, 1], device="neuron"), torch.ones(4, 2)),
    "index_select with a CPU index": lambda: dev(4, 2).index_select(0, torch.tensor([0, 1])),
    "out= on the CPU": lambda: torch.add(dev(3), dev(3), out=torch.empty(3)),
    "0-dim out= on the CPU": lambda: torch.sum(dev(3), 0, out=torch.empty(())),
    "index_put_ with CPU values": lambda: dev(4).index_put_((torch.tensor([0, 1], device="neuron"),), torch.ones(2)),
    # a predicted host fallback (atan2 is not implemented by TorchNeuron) on the zero-copy path
    "predicted fallback atan2": lambda: torch.atan2(dev(3), torch.ones(3)),
    # a data-dependent host fallback on the explicit copy path
    "host-copy fallback bincount": lambda: torch.bincount(torch.tensor([0, 1], device="neuron"), weights=torch.ones(2)),
}


@pytest.mark.parametrize("case", list(MIXED), ids=list(MIXED))
def test_mixing_devices_raises_pytorchs_error_with_the_op_and_the_fix(neuron, case):
    torch.neuron.set_device(0)
    with pytest.raises(RuntimeError) as err:
        MIXED[case]()
    message = str(err.value)
    assert SAME_DEVICE in message
    assert "in method aten::" in message and '.to("neuron:0")' in message


ALLOWED = {
    "0-dim CPU tensor as a scalar": (lambda: dev(3) + torch.tensor(2.0), [3.0] * 3),
    "0-dim CPU tensor in where": (lambda: torch.where(dev(3) > 0, torch.tensor(5.0), dev(3)), [5.0] * 3),
    "Python scalar": (lambda: dev(3) * 2, [2.0] * 3),
    "CPU index tensor": (lambda: torch.arange(4.0, device="neuron")[torch.tensor([0, 2])], [0.0, 2.0]),
    "CPU boolean mask": (lambda: torch.arange(4.0, device="neuron")[torch.tensor([True, False, True, False])],
                         [0.0, 2.0]),
    "index_put_ with a 0-dim CPU index": (
        lambda: torch.zeros(3, device="neuron").index_put_((torch.tensor(1),), torch.tensor(7.0, device="neuron")),
        [0.0, 7.0, 0.0]),
    # a non-0-dim CPU index of a write is refused there (the host_index_writes rule, tests/device/test_target_rules.py)
    "copy_ from the CPU": (lambda: dev(3).copy_(torch.full((3,), 4.0)), [4.0] * 3),
    "copy_ to the CPU": (lambda: torch.zeros(3).copy_(dev(3)), [1.0] * 3),
    ".to() both ways": (lambda: torch.full((3,), 2.0).to("neuron").cpu(), [2.0] * 3),
}


@pytest.mark.parametrize("case", list(ALLOWED), ids=list(ALLOWED))
def test_cases_accelerators_allow_still_run(neuron, case):
    make, expected = ALLOWED[case]
    assert make().cpu().tolist() == expected


def test_cpu_only_ops_are_not_affected(neuron):
    assert (torch.ones(2) + torch.ones(2)).tolist() == [2.0, 2.0]


def test_a_rejected_call_changes_nothing(neuron):
    x = dev(3)
    with pytest.raises(RuntimeError, match="same device"):
        x.add_(torch.ones(3))
    assert x.cpu().tolist() == [1.0] * 3


# PyTorch's TestCommon.test_out: an `out=` tensor on the wrong device must raise. A fixed
# sample of op_db's ops with out= support (first sample input each), so CI stays fast.
OUT_SAMPLE = (
    "abs", "add", "addcmul", "addmm", "amax", "argmax", "bitwise_and", "bmm", "cat", "clamp", "cos", "cumsum",
    "div", "eq", "exp", "gather", "index_select", "lerp", "log", "logical_and", "lt", "matmul", "maximum",
    "mean", "minimum", "mm", "mul", "pow", "remainder", "sigmoid", "sin", "sort", "stack", "sub", "sum",
    "tanh", "topk", "tril", "triu", "where",
)


def test_out_on_the_wrong_device_raises_for_op_db_ops(neuron):
    from torch.testing._internal.common_methods_invocations import op_db

    infos = {}
    for op in op_db:
        if op.name in OUT_SAMPLE and op.supports_out and op.name not in infos:
            infos[op.name] = op
    checked, lax = [], []
    for name, op in sorted(infos.items()):
        dtype = torch.float32 if torch.float32 in op.supported_dtypes("cpu") else sorted(
            op.supported_dtypes("cpu"), key=str)[0]
        sample = next(iter(op.sample_inputs("neuron", dtype)))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        outputs = expected if isinstance(expected, (tuple, list)) else (expected,)
        out = tuple(torch.empty_like(o, device="cpu") for o in outputs)
        try:
            op(sample.input, *sample.args, **sample.kwargs, out=out if isinstance(expected, (tuple, list)) else out[0])
        except RuntimeError as exc:
            # the device's check, or PyTorch's own in a composite (matmul -> dot.out)
            if "to be on the same device" not in str(exc):
                lax.append(f"{name}: {exc}")
        else:
            lax.append(f"{name}: no error")
        checked.append(name)
    assert len(checked) >= 35, checked
    assert not lax, lax
