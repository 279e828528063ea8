"""The unboxed kernels of the hottest ops (csrc/Unboxed.cpp): the CPU's numbers, the boxed
path's rules (accounting, signatures, placement, target numerics, host fallbacks), and a
fresh result relabelled as device memory."""

from __future__ import annotations

import pytest
import torch

import torchferry.device
from tests.device.test_profile import _profile_with
from torchferry.device import _C

UNBOXED = _C._unboxed_ops()


def test_the_hot_ops_have_unboxed_kernels_and_nothing_autograd_needs_is_displaced(neuron):
    # The rule for the list: a CPU kernel to run, and no CompositeImplicitAutograd kernel, whose
    # autograd a backend kernel would cut off. The list must cover the step's hottest ops.
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert {"aten::mul.Tensor", "aten::add.Tensor", "aten::mm", "aten::add_.Tensor", "aten::cat"} <= set(UNBOXED)
    for name in UNBOXED:
        assert has(name, "CPU"), name
        assert has(name, "PrivateUse1"), name
        assert not has(name, "CompositeImplicitAutograd"), name


def _samples(device: str) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(8, 16, generator=g).to(device) for _ in range(2))
    m = torch.randn(16, 4, generator=g).to(device)
    pos = a.abs().add(0.5)
    return {
        "mul": lambda: a * b, "mul by a number": lambda: a * 3.0, "add": lambda: a + b, "sub": lambda: a - b,
        "div": lambda: a / pos, "mm": lambda: a @ m, "bmm": lambda: torch.bmm(a[None], m[None]),
        "addmm": lambda: torch.addmm(a[:, :4], a, m), "cat": lambda: torch.cat([a, b], dim=1),
        "neg": lambda: -a, "rsqrt": lambda: pos.rsqrt(), "sqrt": lambda: pos.sqrt(), "pow": lambda: a.pow(2),
        "silu": lambda: torch.nn.functional.silu(a), "mean": lambda: a.mean(-1, keepdim=True),
        "sum": lambda: a.sum(0), "exp": lambda: a.exp(), "tanh": lambda: a.tanh(), "sigmoid": lambda: a.sigmoid(),
        "sin": lambda: a.sin(), "cos": lambda: a.cos(),
        "add_": lambda: a.clone().add_(b, alpha=2), "sub_": lambda: a.clone().sub_(b), "mul_": lambda: a.clone().mul_(b),
        "div_": lambda: a.clone().div_(pos), "addcdiv_": lambda: a.clone().addcdiv_(b, pos, value=-0.5),
        "addcmul_": lambda: a.clone().addcmul_(b, b, value=0.1), "lerp_": lambda: a.clone().lerp_(b, 0.1),
        "zero_": lambda: a.clone().zero_(), "fill_": lambda: a.clone().fill_(7.0),
    }


@pytest.mark.parametrize("case", sorted(_samples("cpu")))
def test_unboxed_ops_compute_the_cpus_numbers_bitwise(neuron, case):
    expected = _samples("cpu")[case]()
    got = _samples("neuron")[case]()
    assert got.device.type == "neuron" and got.untyped_storage().device.type == "neuron"
    assert torch.equal(got.cpu(), expected), case


def test_each_unboxed_call_is_counted_once_on_either_path(neuron):
    x, y = torch.ones(4, device="neuron"), torch.ones(4, device="neuron")
    neuron.clear_op_tracking()
    x * y  # the unboxed path
    x * torch.tensor(2.0)  # a 0-dim CPU number: still unboxed
    x.add_(x)  # self is also an input: handed to the boxed path
    x.add_(y)
    executed = neuron.get_executed_ops()
    assert executed["aten::mul.Tensor"] == 2 and executed["aten::add_.Tensor"] == 2
    assert neuron.get_fallback_ops() == {}
    assert x.cpu().tolist() == [3.0] * 4


def test_a_signature_is_the_same_on_the_boxed_and_the_unboxed_path(neuron):
    # x.add_(x) takes the boxed path, x.add_(y) the unboxed one: same op, dtypes and shapes,
    # so one signature, as TorchNeuron's cache would key them.
    # A shape no other test uses, so the first call's signature is new to this process.
    x, y = torch.ones(3, 17, device="neuron"), torch.ones(3, 17, device="neuron")
    transposed = torch.ones(17, 3, device="neuron").t()
    mark = torchferry.device.eager_compiles()
    x.add_(x)
    x.add_(y)
    x.add_(y, alpha=2)  # a scalar is keyed by its type only
    x.add_(transposed)  # and a tensor by its shape and dtype, not its strides
    delta = torchferry.device.eager_compiles().since(mark)
    assert delta.calls == 4 and delta.signatures == 1


def test_a_tensor_on_another_device_still_raises_the_placement_error(neuron):
    x = torch.ones(4, 4, device="neuron")
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*neuron:0 and cpu"):
        x * torch.ones(4, 4)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        torch.cat([x, torch.ones(4, 4)])


def test_64_bit_values_take_the_target_numerics_of_the_boxed_path(neuron, numerics):
    big = torch.tensor([2**31 + 5], dtype=torch.int64)
    numerics("target")
    assert (big.to("neuron") * 1).cpu().tolist() == [(big * 1).to(torch.int32).tolist()[0]]
    numerics("host")
    assert (big.to("neuron") * 1).cpu().tolist() == [2**31 + 5]


def test_a_fresh_result_is_relabelled_as_device_memory_and_charged(neuron):
    x = torch.ones(256, 256, device="neuron")
    before = neuron.memory_allocated()
    z = x * 2
    assert neuron.memory_allocated() - before == z.untyped_storage().nbytes()
    assert z.untyped_storage().device == z.device == x.device and not z.is_cpu
    z.add_(1)  # a relabelled tensor is an ordinary device tensor from here on
    assert z[0, 0].item() == 3.0
    del z
    assert neuron.memory_allocated() == before


def test_an_unboxed_op_the_profile_lists_as_a_host_fallback_takes_the_host_path(run_python, tmp_path):
    profile = _profile_with(tmp_path, '[[host_fallback]]\nop = "aten::mul.Tensor"\nreason = "r"\nsources = ["src"]\n')
    result = run_python(
        """
        import torch, torchferry.device
        torchferry.device.enable()
        x = torch.full((4,), 3.0, device="neuron")
        torch.neuron.clear_op_tracking()
        z = x * x
        print(torch.neuron.get_fallback_ops(), "aten::mul.Tensor" in torch.neuron.get_executed_ops(),
              z.cpu().tolist(), z.untyped_storage().data_ptr() != x.untyped_storage().data_ptr())
        """,
        env={"TORCHFERRY_PROFILE": str(profile), "TORCHFERRY_FALLBACK": "silent"},
    )
    assert result.stdout.split("\n")[0] == "{'aten::mul.Tensor': 1} False [9.0, 9.0, 9.0, 9.0] True", result.stderr


def test_pooled_host_views_keep_no_device_memory_alive(neuron):
    # A thread reuses the host views of an op's arguments for the next op; a view waiting in
    # the pool must not hold its last argument's memory, on either path.
    x = torch.ones(512, 512, device="neuron")
    y = torch.ones(512, 512, device="neuron")
    z = x * y  # unboxed
    w = torch.nn.functional.softplus(y)  # boxed
    held = neuron.memory_allocated()
    del x, y
    assert neuron.memory_allocated() == held - 2 * 512 * 512 * 4
    assert z.cpu().sum().item() == 512 * 512 and w.device.type == "neuron"
    # Reused views take each new argument's dtype, shape, strides and offset.
    a = torch.arange(6, dtype=torch.int32, device="neuron").reshape(2, 3)
    b = torch.arange(12.0, device="neuron").reshape(3, 4).t()[1:]
    assert (a * 2).cpu().tolist() == [[0, 2, 4], [6, 8, 10]]
    assert (b + 0).cpu().tolist() == torch.arange(12.0).reshape(3, 4).t()[1:].tolist()


# ---- The optimizers' native foreach ops ----------------------------------------------------

FOREACH = _C._unboxed_foreach_ops()


def test_foreach_kernels_stand_for_ops_the_target_registers_natively(neuron):
    from torchferry.device import _runtime

    native = _runtime.profile().native_ops.native
    assert {"aten::_foreach_mul_.Scalar", "aten::_foreach_add_.List", "aten::_foreach_div_.ScalarList"} <= set(FOREACH)
    for name in FOREACH:
        assert name in native, name
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name


def test_without_the_native_table_a_foreach_op_keeps_pytorchs_composite(run_python, tmp_path):
    # The kernels stand for the target's native ones: a profile that does not say the target has
    # them gets PyTorch's composite, one per-tensor op per element.
    result = run_python(
        """
        import torch, torchferry.device
        torchferry.device.enable()
        xs = [torch.ones(3, device="neuron") for _ in range(4)]
        torch.neuron.clear_op_tracking()
        torch._foreach_mul_(xs, 2.0)
        executed = torch.neuron.get_executed_ops()
        parts = sum(n for op, n in executed.items() if op.startswith("aten::mul"))
        print(executed.get("aten::_foreach_mul_.Scalar"), parts, xs[3].cpu().tolist())
        """,
        env={"TORCHFERRY_PROFILE": str(_profile_with(tmp_path, "")), "TORCHFERRY_FALLBACK": "silent"},
    )
    assert result.stdout.split("\n")[0] == "None 4 [2.0, 2.0, 2.0]", result.stderr


def _foreach_samples(device: str) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)

    def tensors() -> list[torch.Tensor]:  # shapes as a model's parameters: a matrix, a transposed one, a vector, a 0-dim
        return [t.to(device) for t in (torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g).t(),
                                       torch.randn(11, generator=g), torch.randn((), generator=g))]

    a, b = tensors(), tensors()
    factor = torch.tensor(0.37).to(device)
    return {
        "add_ Scalar": lambda: torch._foreach_add_(a, 1e-8) or a,
        "add_ int": lambda: torch._foreach_add_(a, 3) or a,
        "add_ List alpha": lambda: torch._foreach_add_(a, b, alpha=-0.01) or a,
        "add List alpha": lambda: torch._foreach_add(a, b, alpha=0.3),
        "mul_ Scalar": lambda: torch._foreach_mul_(a, 0.999) or a,
        "mul_ Tensor": lambda: torch._foreach_mul_(a, factor) or a,
        "div_ ScalarList": lambda: torch._foreach_div_(a, [0.3, 7, True, 1e-3]) or a,
    }


@pytest.mark.parametrize("case", sorted(_foreach_samples("cpu")))
def test_foreach_kernels_compute_the_cpus_numbers_bitwise(neuron, case):
    expected = _foreach_samples("cpu")[case]()
    neuron.clear_op_tracking()
    got = _foreach_samples("neuron")[case]()
    assert all(t.device.type == "neuron" for t in got)
    assert all(torch.equal(d.cpu(), c) for d, c in zip(got, expected)), case
    foreach_calls = {op: n for op, n in neuron.get_executed_ops().items() if op.startswith("aten::_foreach")}
    assert list(foreach_calls.values()) == [1], foreach_calls  # once, as itself, not per element


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
], ids=["AdamW", "Adam weight decay", "SGD momentum"])
def test_pytorchs_foreach_optimizers_step_as_on_the_cpu(neuron, make):
    # The CPU's own foreach implementation is the reference: the same ops, element by element.
    def train(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)).to(device)
        optimizer = make(model.parameters())
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1)).to(device)
        for _ in range(3):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01, foreach=True)
            optimizer.step()
        return [p.detach() for p in model.parameters()]

    expected = train("cpu")
    neuron.clear_op_tracking()
    got = train("neuron")
    assert all(torch.equal(d.cpu(), c) for d, c in zip(got, expected))
    assert neuron.get_executed_ops().get("aten::_foreach_mul_.Tensor") == 3, "clip_grad_norm_'s scaling, once a step"


def test_a_foreach_signature_is_the_same_on_the_boxed_and_the_unboxed_path(neuron):
    # A negated view takes the boxed path; a plain one the unboxed path: one signature.
    xs = [torch.ones(3, 19, device="neuron") for _ in range(2)]
    ys = [torch.ones(3, 19, device="neuron") for _ in range(2)]
    mark = torchferry.device.eager_compiles()
    torch._foreach_add_(xs, [torch._neg_view(y) for y in ys], alpha=2)
    torch._foreach_add_(xs, ys, alpha=3)
    delta = torchferry.device.eager_compiles().since(mark)
    assert delta.calls == 2 and delta.signatures == 1
    assert xs[0].cpu().unique().tolist() == [2.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["unboxed", "boxed"])
def test_a_scalar_list_keys_a_signature_as_on_the_boxed_path(neuron, dtype):
    # An int by its value (TorchNeuron's cache sees the list's values), any other number by its type.
    xs = [torch.ones(2, 23, dtype=dtype, device="neuron") for _ in range(2)]
    mark = torchferry.device.eager_compiles()
    for numbers in ([2, 3], [2, 3], [2, 4], [0.5, 0.25], [0.5, 0.125]):
        torch._foreach_div_(xs, numbers)
    delta = torchferry.device.eager_compiles().since(mark)
    assert delta.calls == 5 and delta.signatures == 3


def test_foreach_calls_the_kernels_do_not_take_raise_what_the_cpu_and_the_target_raise(neuron):
    cpu = [torch.ones(3), torch.ones(3)]
    xs = [t.to("neuron") for t in cpu]

    def message(call) -> str:
        with pytest.raises(RuntimeError) as raised:
            call()
        return str(raised.value)

    assert message(lambda: torch._foreach_mul_(xs[:0], 2.0)) == message(lambda: torch._foreach_mul_(cpu[:0], 2.0))
    assert message(lambda: torch._foreach_add_(xs, xs[:1])) == message(lambda: torch._foreach_add_(cpu, cpu[:1]))
    assert message(lambda: torch._foreach_div_(xs, [1.0])) == message(lambda: torch._foreach_div_(cpu, [1.0]))
    expanded = [torch.ones(1, device="neuron").expand(3)]
    assert "single memory location" in message(lambda: torch._foreach_mul_(expanded, 2.0))
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        torch._foreach_add_([xs[0], torch.ones(3)], 1.0)
    assert all(t.cpu().tolist() == [1.0] * 3 for t in xs), "a refused call wrote nothing"


def test_a_functional_foreach_result_is_device_memory_with_its_gradient(neuron):
    a = [torch.randn(64, 64, device="neuron", requires_grad=True) for _ in range(2)]
    b = [torch.randn(64, 64, device="neuron") for _ in range(2)]
    before = neuron.memory_allocated()
    out = torch._foreach_add(a, b, alpha=0.5)
    assert neuron.memory_allocated() - before == 2 * 64 * 64 * 4
    assert all(o.untyped_storage().device.type == "neuron" for o in out)
    sum(o.sum() for o in out).backward()
    assert all(t.grad.device.type == "neuron" and t.grad.cpu().unique().tolist() == [1.0] for t in a)
