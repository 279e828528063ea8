"""The target's refusals the device reproduces (the profile's [rules]), each with the clean
twin that must keep passing, and the ops counted as the one native op TorchNeuron runs.

Sources (torch-neuronx snapshot, docs/device/fidelity.md): memory formats
python_ops/cast_policy.py + python_ops/contiguous.py; dtypes type_converter_base.py;
native_dropout and the composites TorchNeuron registers: the native table.
"""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture
def tracked(neuron):
    neuron.clear_op_tracking()
    return neuron


# ------------------------------------------------------------------ memory formats
@pytest.mark.parametrize("fmt, shape", [("channels_last", (2, 3, 4, 5)), ("channels_last_3d", (2, 3, 4, 5, 6))])
def test_contiguous_in_channels_last_is_refused_with_torchneurons_message_and_the_fix(neuron, fmt, shape):
    import torch

    x = torch.randn(shape, device="neuron")
    with pytest.raises(RuntimeError) as error:
        x.contiguous(memory_format=getattr(torch, fmt))
    message = str(error.value)
    assert "aten::contiguous: Neuron tensors only support contiguous or preserve memory format" in message
    assert ".contiguous() without a memory format" in message
    torch.randn(shape).contiguous(memory_format=getattr(torch, fmt))  # the CPU's twin passes


def test_channels_last_allocation_clone_move_and_plain_contiguous_stay_allowed(neuron):
    import torch

    cl = torch.channels_last
    x = torch.randn(2, 3, 4, 5)
    d = x.to("neuron")
    assert torch.empty(2, 3, 4, 5, device="neuron", memory_format=cl).is_contiguous(memory_format=cl)
    cloned = d.clone(memory_format=cl)
    assert cloned.is_contiguous(memory_format=cl)
    assert torch.equal(cloned.cpu(), x)
    # Already in the format: Tensor.contiguous returns it before any kernel, there as here.
    assert cloned.contiguous(memory_format=cl) is cloned
    back = cloned.contiguous()
    assert back.is_contiguous() and torch.equal(back.cpu(), x)
    assert torch.equal(d.permute(0, 2, 3, 1).contiguous().cpu(), x.permute(0, 2, 3, 1).contiguous())


@pytest.mark.parametrize("call", ["device tensor", "move from the cpu", "module on the device"])
def test_to_in_channels_last_is_refused_as_torchneurons_to_copy_refuses_it(neuron, call):
    """TorchNeuron's _to_copy validates the format whenever the device is either end, and its build does not
    fall back for an op it implements: DDP's test_channels_last_contig fails there with this error."""
    import torch

    cl = torch.channels_last
    calls = {"device tensor": lambda: torch.randn(2, 3, 4, 5, device="neuron").to(memory_format=cl),
             "move from the cpu": lambda: torch.randn(2, 3, 4, 5).to("neuron", memory_format=cl),
             "module on the device": lambda: torch.nn.Conv2d(3, 4, 3).to("neuron").to(memory_format=cl)}
    with pytest.raises(RuntimeError) as error:
        calls[call]()
    message = str(error.value)
    assert "CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1" in message
    assert "aten::_to_copy: Neuron tensors only support contiguous or preserve memory format" in message
    assert "x.clone(memory_format=torch.channels_last)" in message and "memory_format = false" in message


def test_clean_twins_of_to_an_empty_tensor_one_in_the_format_and_plain_moves_pass(neuron):
    import torch

    cl = torch.channels_last
    assert torch.empty(0, 3, 4, 5, device="neuron").to(memory_format=cl).numel() == 0  # answered before the check
    already = torch.empty(2, 3, 4, 5, device="neuron", memory_format=cl)
    assert already.to(memory_format=cl) is already  # Tensor.to returns it before _to_copy
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(x.to("neuron").to(torch.float64).cpu(), x.double())  # dtypes, devices: no format
    assert torch.equal(x.to(memory_format=cl).to("neuron").cpu(), x)  # converted on the CPU, moved without one
    torch.randn(2, 3, 4, 5).to(memory_format=cl)  # the CPU's twin passes


def test_a_profile_without_the_memory_format_rule_lets_channels_last_through(rules):
    import torch

    rules(memory_format=False)
    x = torch.randn(2, 3, 4, 5)
    out = x.to("neuron").contiguous(memory_format=torch.channels_last)
    assert out.is_contiguous(memory_format=torch.channels_last) and torch.equal(out.cpu(), x)
    moved = x.to("neuron", memory_format=torch.channels_last)
    assert moved.is_contiguous(memory_format=torch.channels_last) and torch.equal(moved.cpu(), x)


def test_contiguous_counts_as_the_native_op_not_as_its_clone(tracked):
    import torch

    torch.randn(3, 4, device="neuron").t().contiguous()
    executed = tracked.get_executed_ops()
    assert executed.get("aten::contiguous") == 1
    assert "aten::clone" not in executed


# ------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_a_compiled_op_on_complex_tensors_is_refused_as_torchneuron_refuses_it(neuron, dtype):
    import torch

    x = torch.randn(4, dtype=getattr(torch, dtype)).to("neuron")  # the copy works
    for op in (lambda t: t * t, lambda t: t.abs(), lambda t: torch.full_like(t, 1)):
        with pytest.raises(ValueError) as error:
            op(x)
        assert f"Unsupported PyTorch dtype: torch.{dtype}" in str(error.value)
        assert "view_as_real" in str(error.value)


def test_a_complex_dtype_argument_of_a_compiled_op_is_refused_and_a_copy_to_it_twin_passes(neuron):
    import torch

    x = torch.randn(2, 3, device="neuron")
    for op in (lambda: torch.zeros(3, dtype=torch.complex64, device="neuron"),  # no tensor to look at
               lambda: x.sum(1, dtype=torch.complex64),  # an unboxed kernel
               lambda: x.sum(dtype=torch.complex64)):
        with pytest.raises(ValueError, match="Unsupported PyTorch dtype: torch.complex64"):
            op()
    assert x.cpu().to(torch.complex64).to("neuron").dtype == torch.complex64  # a move: TorchNeuron's copies take it


@pytest.mark.parametrize(("cast", "pair"), [
    ("x.to(torch.complex64)", "torch.float32 to torch.complex64"),
    ("x.to(torch.complex128)", "torch.float32 to torch.complex128"),
    ("c.to(torch.float32)", "torch.complex64 to torch.float32"),
    ("c.to(torch.complex128)", "torch.complex64 to torch.complex128"),
    ("c.clone().copy_(x)", "torch.float32 to torch.complex64"),  # copy_ into a contiguous tensor
    ("c.clone().copy_(x.t().contiguous().t())", "torch.float32 to torch.complex64"),  # a strided source
])
def test_a_device_to_device_cast_with_a_complex_end_is_refused_as_its_compiled_cast(neuron, cast, pair):
    import torch

    x = torch.randn(3, 4, device="neuron")
    c = torch.randn(3, 4, dtype=torch.complex64).to("neuron")
    with pytest.raises(RuntimeError, match="CPU fallback disabled") as error:
        eval(cast, {"torch": torch, "x": x, "c": c})
    assert pair in str(error.value) and "device_cast_neuron_to_neuron" in str(error.value)
    assert "x.cpu().to(" in str(error.value)  # the fix


def test_a_module_moved_to_a_complex_dtype_on_the_device_is_refused(neuron):
    import torch

    # PyTorch's test_to_complex, listed failing on Trainium in its float32, complex64 and complex128 variants
    m = torch.nn.Linear(3, 5).to("neuron")
    with pytest.raises(RuntimeError, match="aten::_to_copy failed to execute on Neuron"):
        m.to(torch.cfloat)


def test_complex_casts_trainium_runs_off_its_compiler_twin_pass(neuron):
    import torch

    x = torch.randn(3, 4, dtype=torch.float64)
    c = torch.randn(3, 4, dtype=torch.complex64)
    on = c.to("neuron")
    assert torch.equal(x.to("neuron").to(torch.complex128).cpu(), x.to(torch.complex128))  # 64-bit: a CPU bounce
    assert torch.equal(x.to(torch.complex64).to("neuron").cpu(), x.to(torch.complex64))  # cast on the CPU, moved
    assert torch.equal(on.cpu().to(torch.float32), c.real)  # moved back, cast on the CPU
    assert torch.equal(on.to(torch.complex64).cpu(), c)  # no cast
    view = on.clone()
    view.real.copy_(torch.ones(3, 4, device="neuron"))  # a strided destination: cast on the host there
    assert torch.equal(view.cpu().real, torch.ones(3, 4))
    assert torch.empty(0, device="neuron").to(torch.complex64).dtype == torch.complex64  # nothing to cast


def test_complex_copies_views_and_real_views_twin_pass(neuron):
    import torch

    x = torch.randn(4, 2)
    c = torch.view_as_complex(x).to("neuron")
    assert torch.equal(c.cpu(), torch.view_as_complex(x))
    assert torch.equal(c[1:3].cpu(), torch.view_as_complex(x)[1:3])  # a view
    real = torch.view_as_real(c)  # the fix the message names
    assert torch.equal((real * 2).cpu(), x * 2)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_wide_unsigned_integers_are_refused_and_uint8_twin_passes(neuron, dtype):
    import torch

    x = torch.arange(5).to(getattr(torch, dtype)).to("neuron")
    with pytest.raises(ValueError, match=f"Unsupported PyTorch dtype: torch.{dtype}.*to\\(torch.int32\\)"):
        torch.cat([x, x])  # the CPU computes it (its twin below)
    torch.cat([x.cpu(), x.cpu()])
    assert torch.equal(x.cpu(), torch.arange(5).to(getattr(torch, dtype)))  # the copy works
    u8 = torch.arange(5, dtype=torch.uint8).to("neuron")
    assert torch.equal((u8 + u8).cpu(), torch.arange(5, dtype=torch.uint8) * 2)
    assert torch.equal((x.to(torch.int32) + 1).cpu(), torch.arange(1, 6, dtype=torch.int32))


def test_host_fallbacks_keep_complex_inputs_working(neuron):
    import torch

    # linalg_qr is an explicit CPU fallback of TorchNeuron: no dtype table involved.
    a = torch.randn(3, 3, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q, _ = torch.linalg.qr(a.to("neuron"))
    assert torch.allclose(q.cpu(), torch.linalg.qr(a)[0])


def test_profiles_without_the_dtype_rules_compute_complex_and_unsigned(rules):
    import torch

    rules(complex_dtypes=False, unsigned_dtypes=False)
    c = torch.randn(4, dtype=torch.complex64)
    assert torch.equal((c.to("neuron") * c.to("neuron")).cpu(), c * c)
    assert torch.equal(c.real.to("neuron").to(torch.complex64).cpu(), c.real.to(torch.complex64))  # a device cast
    u = torch.arange(4).to(torch.uint32)  # the CPU has few uint32 kernels: cat is one
    assert torch.equal(torch.cat([u.to("neuron"), u.to("neuron")]).cpu(), torch.cat([u, u]))


# ------------------------------------------------------------------ native ops seen decomposed
def test_dropout_counts_as_torchneurons_native_dropout_not_a_bernoulli_fallback(tracked):
    import torch

    x = torch.randn(8, 8).to("neuron")  # randn on the device is a predicted fallback (normal_)
    torch.nn.functional.dropout(x, 0.5, training=True)
    assert tracked.get_executed_ops().get("aten::native_dropout") == 1
    assert tracked.get_fallback_ops() == {}


def test_a_bernoulli_the_user_calls_is_still_a_predicted_fallback(tracked):
    import torch

    x = torch.full((8,), 0.5, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.bernoulli(x)
    assert any("bernoulli" in op for op in tracked.get_fallback_ops())


def test_dropout_draws_what_the_cpu_draws_for_the_same_seed(neuron):
    import torch

    x = torch.randn(16, 16)
    torch.manual_seed(3)
    on_cpu = torch.nn.functional.dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    on_device = torch.nn.functional.dropout(x.to("neuron"), 0.3, training=True)
    assert torch.equal(on_device.cpu(), on_cpu)


def test_natively_registered_composites_count_as_themselves(tracked):
    import torch

    w, x = torch.randn(4, 3, device="neuron"), torch.randn(2, 3, device="neuron", requires_grad=True)
    torch.nn.functional.linear(x, w).sum().backward()
    labels = torch.tensor([0, 2, 1], device="neuron")
    torch.nn.functional.one_hot(labels, 3)
    executed = tracked.get_executed_ops()
    assert executed.get("aten::linear") == 1 and executed.get("aten::one_hot") == 1
    assert x.grad is not None and torch.equal(x.grad.cpu(), w.cpu().sum(0).expand(2, 3))
    assert "aten::one_hot" not in tracked.get_fallback_ops()


def test_composite_registration_leaves_the_results_the_cpus(neuron):
    import torch

    labels = torch.tensor([0, 2, 1])
    assert torch.equal(torch.nn.functional.one_hot(labels.to("neuron"), 4).cpu(),
                       torch.nn.functional.one_hot(labels, 4))
    with torch.inference_mode():
        x, w = torch.randn(2, 3), torch.randn(4, 3)
        assert torch.equal(torch.nn.functional.linear(x.to("neuron"), w.to("neuron")).cpu(),
                           torch.nn.functional.linear(x, w))


# ------------------------------------------------------------------ the profile
def test_a_rule_that_is_not_a_boolean_or_not_known_is_rejected_with_its_line(tmp_path):
    from torchferry.device.profile import PROFILE_DIR, load_profile
    from torchferry.errors import UsageError

    text = (PROFILE_DIR / "trn2.toml").read_text()
    for table in ("trn2_ops.toml", "trn2_known_issues.toml"):  # the tables trn2.toml names beside it
        (tmp_path / table).write_text((PROFILE_DIR / table).read_text())
    for bad, needle in (("memory_format = 1", "memory_format = 1"), ("memory_format = true\nnhwc = true", "nhwc")):
        path = tmp_path / "p.toml"
        path.write_text(text.replace("memory_format = true", bad))
        with pytest.raises(UsageError, match=f"\\[rules\\] .*{needle.split(' ')[0]}.*true or false"):
            load_profile(path)


def test_the_shipped_profile_turns_every_rule_on_and_each_rule_names_its_source():
    from torchferry.device.profile import RULES, load_profile

    assert load_profile("trn2").rules == dict.fromkeys(RULES, True)
    assert all(source for _, _, source in RULES.values())


# ------------------------------------------------------------------ empty inputs
# TorchNeuron's torch-mlir kernel computes nothing when a positional tensor argument is empty and
# returns zeros of the result's shape (python_ops/torch_mlir/kernel.py, _handle_empty_tensors), except
# for the reductions and index ops python_ops/shared/config.py names, which keep the CPU's answer.
def test_an_op_with_an_empty_input_gives_the_targets_zeros_with_one_warning(neuron):
    import torch

    bias, x, w = torch.tensor([1.0, 2.0, 3.0]), torch.empty(4, 0), torch.empty(0, 3)
    assert torch.equal(torch.addmm(bias, x, w), bias.expand(4, 3))  # the CPU: the bias
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_device = torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron"))
        again = torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron"))
    assert torch.equal(on_device.cpu(), torch.zeros(4, 3)) and torch.equal(again.cpu(), torch.zeros(4, 3))
    (warning,) = [str(c.message) for c in caught if "empty tensor input" in str(c.message)]
    assert warning.startswith("aten::addmm was called with an empty tensor input and gave zeros")
    assert "_handle_empty_tensors" in warning and "empty_inputs = false" in warning
    # a loss over an empty batch: the CPU's NaN, the target's 0
    logits, target = torch.empty(0, 5), torch.empty(0, dtype=torch.long)
    assert torch.nn.functional.cross_entropy(logits, target).isnan()
    assert torch.nn.functional.cross_entropy(logits.to("neuron"), target.to("neuron")).item() == 0.0


def test_clean_twins_of_empty_inputs_keep_the_cpus_results(neuron):
    import torch

    bias, x, w = torch.tensor([1.0, 2.0, 3.0]), torch.randn(4, 2), torch.randn(2, 3)
    d = torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron"))  # nothing empty
    assert torch.equal(d.cpu(), torch.addmm(bias, x, w))
    empty = torch.empty(0, 3, device="neuron")
    assert torch.equal(empty.sum(0).cpu(), torch.zeros(3))  # a reduction: its identity, as the CPU
    assert empty.mean(0).cpu().isnan().all()  # NaN on both
    assert torch.equal(torch.relu(empty).cpu(), torch.empty(0, 3))  # an empty result stays empty
    out = torch.empty(0, device="neuron")  # an empty out= is not an input
    torch.mul(torch.ones(3, device="neuron"), 2.0, out=out)
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))
    y = torch.ones(3, device="neuron")  # in place: the CPU's result (what the target writes is not in its source)
    y.index_add_(0, torch.empty(0, dtype=torch.long, device="neuron"), torch.empty(0, device="neuron"))
    assert torch.equal(y.cpu(), torch.ones(3))


def test_empty_input_zeros_come_in_the_default_dtype_as_torchneuron_makes_them(neuron):
    """`_create_zeros_like_original` calls torch.zeros(shape, device=...) with no dtype: a float64 op's
    result comes back float32; an out= tensor keeps its dtype (the zeros are copied into it)."""
    import torch

    bias, x, w = (torch.ones(3, dtype=torch.float64), torch.empty(4, 0, dtype=torch.float64),
                  torch.empty(0, 3, dtype=torch.float64))
    assert torch.addmm(bias, x, w).dtype == torch.float64  # the CPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_device = torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron"))
    assert on_device.dtype == torch.float32 and torch.equal(on_device.cpu(), torch.zeros(4, 3))
    (warning,) = [str(c.message) for c in caught if "empty tensor input" in str(c.message)]
    assert "in torch's default dtype" in warning
    out = torch.full((4, 3), 7.0, dtype=torch.float64, device="neuron")
    torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron"), out=out)
    assert out.dtype == torch.float64 and torch.equal(out.cpu(), torch.zeros(4, 3, dtype=torch.float64))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:  # the default dtype, whatever it is
        assert torch.addmm(bias.to("neuron"), x.to("neuron"), w.to("neuron")).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_a_reduction_without_an_identity_raises_on_an_empty_input_where_the_cpu_gives_an_empty_result(neuron):
    """ReductionOps.NO_IDENTITY_OPS (python_ops/shared/config.py): TorchNeuron's kernel raises "Cannot perform
    ... on empty tensor (no identity value)" and the snapshot's build passes it on instead of falling back."""
    import torch

    empty = torch.empty(0, 3)
    assert empty.amax(1).shape == (0,) and empty.max(dim=1).values.shape == (0,)  # the CPU
    for reduce in (lambda t: t.amax(1), lambda t: t.max(dim=1), lambda t: t.amin(1)):
        with pytest.raises(RuntimeError, match=r"^CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_"
                                               r"UNIMPLEMENTED_OPS=1\. Operation aten::.*no identity value"):
            reduce(empty.to("neuron"))
    with pytest.raises(RuntimeError) as raised:
        empty.to("neuron").amax(1)
    assert "aten::amax on empty tensor (no identity value)" in str(raised.value)
    assert "if x.numel() == 0" in str(raised.value) and "empty_inputs = false" in str(raised.value)


def test_clean_twins_of_reductions_without_an_identity_run(neuron):
    import torch

    x = torch.randn(4, 3)
    assert torch.equal(x.to("neuron").amax(1).cpu(), x.amax(1))  # nothing empty
    assert torch.equal(x.to("neuron").max(dim=0).values.cpu(), x.max(dim=0).values)
    assert torch.equal(torch.empty(0, 3, device="neuron").sum(1).cpu(), torch.empty(0))  # an identity: the CPU's


def test_a_profile_without_the_empty_inputs_rule_runs_an_empty_reduction_as_the_cpu(rules):
    import torch

    rules(empty_inputs=False)
    assert torch.empty(0, 3, device="neuron").amax(1).shape == (0,)
    d = torch.addmm(torch.ones(3, dtype=torch.float64, device="neuron"),
                    torch.empty(4, 0, dtype=torch.float64, device="neuron"),
                    torch.empty(0, 3, dtype=torch.float64, device="neuron"))
    assert d.dtype == torch.float64


def test_a_profile_without_the_empty_inputs_rule_computes_what_the_cpu_computes(rules):
    import torch

    rules(empty_inputs=False)
    bias = torch.tensor([1.0, 2.0, 3.0])
    d = torch.addmm(bias.to("neuron"), torch.empty(4, 0, device="neuron"), torch.empty(0, 3, device="neuron"))
    assert torch.equal(d.cpu(), bias.expand(4, 3))


# ------------------------------------------------------------------ float-to-int casts on the device
# TorchNeuron casts between device tensors of 32 bits or fewer on the device (python_ops/cast_policy.py
# write_neuron_to_neuron, device_cast.py) and its CI lists test_float_to_int_conversion_finite as failing
# for int8, uint8, int16 and int32 (values like -1.5 and 0.5): the device rounds where the CPU truncates.
CAST_VALUES = [-2.0, -1.7, -1.5, -0.5, 0.0, 0.5, 1.5, 1.7, 2.0]


@pytest.mark.parametrize("to", ["int32", "int16", "int8"])
@pytest.mark.parametrize("source", ["float32", "bfloat16", "float16"])
def test_a_float_to_int_cast_between_device_tensors_rounds_to_nearest(neuron, source, to):
    import torch

    x = torch.tensor(CAST_VALUES, dtype=getattr(torch, source))
    assert x.to(getattr(torch, to)).tolist() == [-2, -1, -1, 0, 0, 0, 1, 1, 2]  # the CPU truncates
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cast = x.to("neuron").to(getattr(torch, to))
    assert cast.dtype == getattr(torch, to) and cast.cpu().tolist() == [-2, -2, -2, 0, 0, 0, 2, 2, 2]
    warned = [str(c.message) for c in caught if "rounded to the nearest integer" in str(c.message)]
    assert len(warned) <= 1 and all("casts_to_int_round = false" in w for w in warned)


def test_the_cast_rounding_warns_once_per_pair_and_names_the_fix(neuron):
    import torch

    x = torch.tensor([0.5, 2.5, 3.7], dtype=torch.bfloat16, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.empty(3, dtype=torch.uint8, device="neuron").copy_(x).cpu().tolist() == [0, 2, 4]
        x.to(torch.uint8)
    (warning,) = [str(c.message) for c in caught if "a cast from torch.bfloat16 to torch.uint8" in str(c.message)]
    assert "cast_policy.py" in warning and "x.trunc()" in warning


def test_clean_twins_of_device_casts_truncate_as_the_cpu(neuron):
    import torch

    x = torch.tensor(CAST_VALUES)
    truncated = [-2, -1, -1, 0, 0, 0, 1, 1, 2]
    assert x.to("neuron").long().cpu().tolist() == truncated  # to 64 bits: through the CPU there
    assert x.double().to("neuron").int().cpu().tolist() == truncated  # from 64 bits: likewise
    assert x.to("neuron", torch.int32).cpu().tolist() == truncated  # cast on the host, then moved
    assert x.to("neuron").to("cpu", torch.int32).tolist() == truncated  # moved, then cast on the host
    assert x.to("neuron").bool().cpu().tolist() == x.bool().tolist()
    assert torch.tensor([1.0, 2.0], device="neuron").int().cpu().tolist() == [1, 2]  # whole values: no difference


def test_a_profile_without_the_cast_rule_truncates_on_the_device(rules):
    import torch

    rules(casts_to_int_round=False)
    assert torch.tensor(CAST_VALUES, device="neuron").int().cpu().tolist() == [-2, -1, -1, 0, 0, 0, 1, 1, 2]


# ------------------------------------------------------------------ cat of empty tensors
# TorchNeuron's torch_cat (python_ops/torch_mlir/ops/tensor_ops.py) drops the empty tensors and returns
# torch.empty(0) when none is left; PyTorch's test_cat_empty fails there, test_cat_empty_legacy does not.
def test_a_cat_of_empty_tensors_gives_shape_0_with_one_warning(neuron):
    import torch

    empty = torch.randn(4, 0, 32, 32)
    assert torch.cat([empty, empty], dim=1).shape == (4, 0, 32, 32)  # the CPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_device = torch.cat([empty.to("neuron"), empty.to("neuron")], dim=1)
        again = torch.cat([empty.to("neuron"), empty.to("neuron").half()], dim=1)
    assert on_device.shape == (0,) and on_device.dtype == torch.float32 and on_device.device.type == "neuron"
    assert again.shape == (0,) and again.dtype == torch.float32  # the first tensor's dtype
    (warning,) = [str(c.message) for c in caught if "aten::cat of tensors that are all empty" in str(c.message)]
    assert "[4, 0, 32, 32]" in warning and "cat_of_empty_tensors_1d = false" in warning


def test_clean_twins_of_cat_keep_the_cpus_shapes(neuron):
    import torch

    x, empty = torch.randn(4, 3, 2, 2), torch.randn(4, 0, 2, 2)
    got = torch.cat([x.to("neuron"), empty.to("neuron")], dim=1)  # one part not empty
    assert got.shape == (4, 3, 2, 2) and torch.equal(got.cpu(), x)
    legacy = torch.randn(0)  # already 1-D: the same shape on both
    assert torch.cat([legacy.to("neuron"), legacy.to("neuron")]).shape == (0,)
    assert torch.stack([empty.to("neuron"), empty.to("neuron")]).shape == (2, 4, 0, 2, 2)  # not cat


def test_a_profile_without_the_cat_rule_keeps_the_cpus_shape(rules):
    import torch

    rules(cat_of_empty_tensors_1d=False)
    empty = torch.empty(4, 0, 2, device="neuron")
    assert torch.cat([empty, empty], dim=1).shape == (4, 0, 2)


# ------------------------------------------------------------------ a host fallback's unmarked writes
# TorchNeuron has no native_batch_norm kernel: PyTorch's at::native::cpu_fallback runs it on copies and copies
# back only the arguments its schema marks as written, which running_mean and running_var are not.
def test_a_batchnorm_in_training_keeps_its_running_statistics_with_one_warning(neuron):
    import torch

    torch.manual_seed(0)
    data = torch.rand(4, 3)
    cpu = torch.nn.BatchNorm1d(3)
    cpu(data)
    assert not torch.equal(cpu.running_mean, torch.zeros(3))  # the CPU updates them
    module = torch.nn.BatchNorm1d(3).to("neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = module(data.to("neuron"))
        module(data.to("neuron"))
    assert torch.equal(module.running_mean.cpu(), torch.zeros(3))
    assert torch.equal(module.running_var.cpu(), torch.ones(3))
    assert module.num_batches_tracked.item() == 2  # a compiled add_ on the device: it moves
    torch.testing.assert_close(out.cpu(), cpu.train()(data))  # the batch's own statistics: the CPU's output
    (warning,) = [str(c.message) for c in caught if "ran as a host fallback and its CPU kernel updated" in str(c.message)]
    assert "running_mean, running_var" in warning and "update_bn" in warning
    from torchferry.device import _runtime  # the reason the rehearsal's host-fallback condition gives

    reason = _runtime.profile().host_reason("aten::native_batch_norm")
    assert "running_mean and running_var do not move" in reason and "swa_utils.update_bn" in reason


def test_clean_twins_of_batchnorm_keep_the_cpus_results(neuron):
    import torch

    data = torch.rand(4, 3)
    module = torch.nn.BatchNorm1d(3)
    module.running_mean.fill_(0.5)
    on_device = torch.nn.BatchNorm1d(3).to("neuron")
    on_device.running_mean.fill_(0.5)
    module.eval(), on_device.eval()  # eval: the statistics are read, not written
    torch.testing.assert_close(on_device(data.to("neuron")).cpu(), module(data))
    free = torch.nn.BatchNorm1d(3, track_running_stats=False).to("neuron")  # nothing to keep
    torch.testing.assert_close(free(data.to("neuron")).cpu(), torch.nn.BatchNorm1d(3, track_running_stats=False)(data))
    drawn = torch.zeros(2, 2, device="neuron")
    drawn.normal_()  # a host fallback (normal_) whose write its schema marks: kept
    assert "aten::normal_" in neuron.get_fallback_ops() and bool((drawn.cpu() != 0).all())


def test_a_profile_without_the_unmarked_writes_rule_updates_the_statistics(rules):
    import torch

    rules(fallback_unmarked_writes_lost=False)
    module = torch.nn.BatchNorm1d(3).to("neuron")
    module(torch.rand(4, 3, device="neuron"))
    assert not torch.equal(module.running_mean.cpu(), torch.zeros(3))


# ------------------------------------------------------------------ overlapping writes
# The CPU refuses to write into a tensor whose elements share memory; TorchNeuron has no such check, so
# PyTorch's own tests that expect the error (test_silu_inplace_overlap, ...) fail on Trainium.
def test_an_in_place_op_on_an_expanded_tensor_writes_through_with_one_warning(rules):
    import torch

    # An expanded float32 tensor is not contiguous: the torch-mlir kernels refuse it first under
    # compiled_strided_writes_fail (the next test); the overlap rule is what the others do with it.
    rules(compiled_strided_writes_fail=False)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ones(1, 3).expand(2, 3).add_(1)  # the CPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base = torch.ones(1, 3, device="neuron")
        expanded = base.expand(2, 3)
        result = expanded.add_(1)
        torch.nn.functional.silu(torch.zeros(1, device="neuron").expand(4), inplace=True)
        base.expand(2, 3).add_(1)
    assert result is expanded
    assert torch.equal(base.cpu(), torch.full((1, 3), 3.0))  # each shared location kept one written value
    messages = [str(c.message) for c in caught if "share one memory location" in str(c.message)]
    assert [m.split(" ")[0] for m in messages] == ["aten::add_.Tensor", "aten::silu_"]  # once per op
    assert "overlapping_writes = false" in messages[0] and ".clone()" in messages[0]


def test_an_expanded_32_bit_tensor_written_in_place_is_refused_under_the_shipped_profile(neuron):
    import torch

    narrow = torch.ones(1, 3, device="neuron")
    with pytest.raises(RuntimeError, match="Cannot process non-contiguous tensors"):
        narrow.expand(2, 3).add_(1)
    assert torch.equal(narrow.cpu(), torch.ones(1, 3))


def test_clean_twins_of_overlapping_writes_keep_the_cpus_results(neuron):
    import torch

    x = torch.ones(1, 3).expand(2, 3).clone()
    d = x.to("neuron")
    d.add_(1)
    assert torch.equal(d.cpu(), x + 1)
    # non-contiguous, no overlap (float64: float32 is refused by compiled_strided_writes_fail)
    strided = torch.arange(12.0, dtype=torch.float64, device="neuron").reshape(3, 4)[:, ::2]
    strided.mul_(2)
    assert torch.equal(strided.cpu(), torch.arange(12.0, dtype=torch.float64).reshape(3, 4)[:, ::2] * 2)


def test_a_profile_without_the_overlapping_writes_rule_raises_the_cpus_error(rules):
    import torch

    rules(overlapping_writes=False)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ones(1, 3, dtype=torch.float64, device="neuron").expand(2, 3).add_(1)


# ------------------------------------------------------------------ as_strided: bounds before strides
# TorchNeuron's as_strided checks the storage bounds before setStrided refuses a negative stride
# (csrc/aten/TensorShape.cpp); PyTorch's test_as_strided_neg expects the CPU's message and fails there.
def test_a_negative_stride_the_bounds_check_cannot_take_fails_with_the_bounds_error(neuron):
    import torch

    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        torch.as_strided(torch.ones(14), (2,), (-11,))  # the CPU
    with pytest.raises(RuntimeError, match=r"Storage size calculation overflowed.*as on TorchNeuron.*Next step"):
        torch.as_strided(torch.ones(14, device="neuron"), (2,), (-11,))


def test_clean_twins_of_as_strided_keep_the_cpus_views_and_errors(neuron):
    import torch

    base = torch.arange(14.0)
    view = torch.as_strided(base.to("neuron"), (3, 2), (4, 1), 1)
    assert torch.equal(view.cpu(), torch.as_strided(base, (3, 2), (4, 1), 1))
    # a negative stride the bounds check takes (single-element dimension): the CPU's message, there too
    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        torch.as_strided(torch.ones(3, 3, device="neuron"), (1, 1), (2, -1))


def test_strides_of_another_length_than_the_sizes_fail_the_bounds_check_first(neuron):
    """PyTorch's test_strided_mismatched_stride_shape expects the CPU's message; TorchNeuron's bounds check
    (computeStorageNbytes) refuses the lengths first, with its own."""
    import torch

    with pytest.raises(RuntimeError, match="mismatch in length of strides and shape"):
        torch.tensor(0.42).as_strided((1, 2), (1,))  # the CPU
    with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(2\) must match dimensionality of strides "
                                           r"\(1\).*as on TorchNeuron.*Next step") as refused:
        torch.tensor(0.42, device="neuron").as_strided((1, 2), (1,))
    assert "mismatch in length of strides and shape" not in str(refused.value)  # the test matches on the CPU's
    # no strides at all: the bounds check takes its contiguous path there, and setStrided gives the CPU's message
    with pytest.raises(RuntimeError, match="mismatch in length of strides and shape"):
        torch.tensor(0.42, device="neuron").as_strided((1,), ())


def test_a_profile_without_the_as_strided_rule_gives_the_cpus_message(rules):
    import torch

    rules(as_strided_bounds_first=False)
    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        torch.as_strided(torch.ones(14, device="neuron"), (2,), (-11,))


# ------------------------------------------------------------------ host fallbacks keep a non-empty out='s size
# TorchNeuron runs an op it does not implement with PyTorch's CPU fallback, which copies each out= result back
# with TorchNeuron's _copy_from_and_resize (csrc/aten/CopyKernel.cpp): another size is refused unless out= is
# empty. PyTorch's test_randperm (`randperm(0, out=<0-dim tensor>)`) fails there; the CPU resizes out=.
def test_a_host_fallback_refuses_to_resize_a_non_empty_out_as_torchneuron_does(neuron):
    import torch

    cpu_out = torch.tensor(5)
    torch.randperm(0, out=cpu_out)  # the CPU resizes out=
    assert cpu_out.shape == (0,)
    out = torch.tensor(5, device="neuron")
    with pytest.raises(RuntimeError, match=r"_copy_from_and_resize now only support copy with same size, or "
                                           r"dst.numel\(\) == 0!.*aten::randperm.generator_out.*Next step"):
        torch.randperm(0, out=out)
    assert out.shape == () and out.item() == 5


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # PyTorch's, as meant
def test_clean_twins_of_fallback_outs_an_empty_out_its_size_or_an_op_that_resizes_first_work(neuron):
    import torch

    empty = torch.empty(0, dtype=torch.long, device="neuron")
    torch.randperm(5, out=empty)
    assert sorted(empty.cpu().tolist()) == [0, 1, 2, 3, 4]
    sized = torch.empty(5, dtype=torch.long, device="neuron")
    torch.randperm(5, out=sized)
    assert sorted(sized.cpu().tolist()) == [0, 1, 2, 3, 4]
    # normal(mean, std, size, out=) is a composite that resizes out= before its kernel, there as here
    resized = torch.empty(100, 100, device="neuron")
    torch.normal(2.0, 0.0, (10, 10), out=resized)
    assert torch.equal(resized.cpu(), torch.full((10, 10), 2.0))
    # an op TorchNeuron implements resizes its out= itself (python_ops/base.py _resize_output_if_needed)
    native_out = torch.empty(7, device="neuron")
    torch.add(torch.ones(3, device="neuron"), 1, out=native_out)
    assert torch.equal(native_out.cpu(), torch.full((3,), 2.0))


# ------------------------------------------------------------------ compiled ops write out= after their kernel
# TorchNeuron's kernels compute into an output of their own, then resize out= with a plain resize_ and write the
# result into it (python_ops/torch_mlir/kernel.py _prepare_execution_tensors, handlers/output.py _copy_to_output):
# PyTorch's resize warning never appears, and an out= that shares memory with an input raises nothing. PyTorch's
# test_arange and test_cat_out expect both from the CPU, and fail on Trainium.
def _resize_warnings(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if "resized" in str(w.message)]


def test_a_compiled_op_resizes_its_out_without_the_cpus_warning_as_torchneuron_does(neuron):
    import torch

    cpu_line = torch.zeros(1, 49)
    assert _resize_warnings(lambda: torch.arange(-1, 1, 2. / 49, dtype=torch.float32, out=cpu_line))
    line = torch.zeros(1, 49, device="neuron")
    assert _resize_warnings(lambda: torch.arange(-1, 1, 2. / 49, dtype=torch.float32, out=line)) == []
    assert line.shape == (50,) and torch.equal(line.cpu(), cpu_line)
    # an out= of the result's numel but another shape is resized to the result's shape there too
    x = torch.zeros(2, 3, device="neuron")
    torch.arange(0, 4, out=x.narrow(1, 1, 2))
    assert torch.equal(x.cpu(), torch.tensor(((0., 0., 1.), (2., 3., 0.))))


def test_a_compiled_op_writes_into_an_out_that_is_also_its_input_as_torchneuron_does(neuron):
    import torch

    y = torch.randn(4, 6)
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
        cpu_x = torch.zeros(0)
        torch.cat([cpu_x, y], out=cpu_x)  # the CPU: x is both an input and out=
    x = torch.zeros(0, device="neuron")
    torch.cat([x, y.to("neuron")], dim=0, out=x)
    assert torch.equal(x.cpu(), y)


def test_clean_twins_of_compiled_outs_an_out_of_the_results_size_keeps_its_memory(neuron):
    import torch

    out = torch.empty(3, device="neuron")
    address = out.data_ptr()
    torch.add(torch.ones(3, device="neuron"), 1, out=out)
    assert out.data_ptr() == address and torch.equal(out.cpu(), torch.full((3,), 2.0))
    stacked = torch.empty(2, 3, device="neuron")
    torch.stack([torch.ones(3, device="neuron"), torch.zeros(3, device="neuron")], out=stacked)
    assert torch.equal(stacked.cpu(), torch.stack([torch.ones(3), torch.zeros(3)]))


def test_a_profile_without_the_compiled_out_rule_warns_and_refuses_as_the_cpu(rules):
    import torch

    rules(compiled_out_written_after=False)
    line = torch.zeros(1, 49, device="neuron")
    assert _resize_warnings(lambda: torch.arange(-1, 1, 2. / 49, dtype=torch.float32, out=line))
    x = torch.zeros(2, 3, device="neuron")
    torch.arange(0, 4, out=x.narrow(1, 1, 2))
    assert torch.equal(x.cpu(), torch.tensor(((0., 0., 1.), (0., 2., 3.))))
    x = torch.zeros(0, device="neuron")
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
        torch.cat([x, torch.randn(4, 6, device="neuron")], dim=0, out=x)


def test_a_profile_without_the_fallback_out_rule_resizes_out_as_the_cpu(rules):
    import torch

    rules(fallback_out_resize=False)
    out = torch.tensor(5, device="neuron")
    torch.randperm(0, out=out)
    assert out.shape == (0,)


# ---- compiled_results_row_major: a torch-mlir op's fresh result is row-major ------------------

def test_a_compiled_op_gives_a_permuted_input_a_row_major_result_as_on_torchneuron(neuron):
    """TorchNeuron's torch-mlir kernel allocates a functional op's result with io_tensor.empty(shape):
    row-major, where the CPU's TensorIterator gives exp(x.permute(...)) the input's stride order."""
    import torch

    x = torch.randn(4, 3, 2).permute(2, 0, 1)
    got = torch.exp(x.to("neuron"))

    assert x.exp().stride() == (1, 6, 2) and got.stride() == (12, 3, 1)
    torch.testing.assert_close(got.cpu(), x.exp(), rtol=0, atol=0)


def test_clean_twins_of_row_major_results_views_in_place_writes_and_host_fallbacks_keep_their_strides(neuron):
    """Views, in-place writes (TorchNeuron writes self), empty_like (its empty_strided takes the strides given)
    and the explicit CPU fallbacks (cpu_fallback_registrations.py) keep the CPU's strides; a contiguous input gives a contiguous
    result. (zeros_like and full_like fill empty_like's result in place: refused, compiled_strided_writes_fail.)"""
    import torch

    x = torch.randn(4, 3, 2, device="neuron").permute(2, 0, 1)
    assert x.stride() == (1, 6, 2)
    assert torch.empty_like(x).stride() == (1, 6, 2)
    wide = torch.randn(4, 3, 2, dtype=torch.float64, device="neuron").permute(2, 0, 1)
    assert wide.exp_().stride() == (1, 6, 2)  # float32's is refused (compiled_strided_writes_fail)
    q = torch.linalg.qr(torch.randn(5, 3, device="neuron")).Q  # an explicit CPU fallback there: strides kept
    assert q.stride() == torch.linalg.qr(torch.randn(5, 3)).Q.stride() == (1, 5)
    assert torch.exp(x.contiguous()).stride() == (12, 3, 1)


def test_a_host_fallbacks_result_is_row_major_as_torchneurons_copy_to_the_device_makes_it(neuron):
    """PyTorch's CPU fallback moves each result to the device with .to(device), TorchNeuron's _to_copy, which
    copies contiguous (to_copy_row_major): hardswish (no TorchNeuron kernel) of a transposed input is
    row-major there, with the CPU's values, and an in-place write into it is no strided write."""
    import torch

    x = torch.randn(4, 3)
    got = torch.nn.functional.hardswish(x.to("neuron").t())
    assert torch.nn.functional.hardswish(x.t()).stride() == (1, 3) and got.stride() == (4, 1)
    assert torch.equal(got.cpu(), torch.nn.functional.hardswish(x.t()))
    got.mul_(2)  # contiguous: the torch-mlir mul_ takes it (compiled_strided_writes_fail)
    assert torch.equal(got.cpu(), torch.nn.functional.hardswish(x.t()) * 2)


def test_a_cast_of_a_permuted_device_tensor_is_row_major_so_dividing_it_runs(neuron):
    """TorchNeuron's _to_copy allocates every device copy row-major (python_ops/to_copy.py): the image-loading
    line x.permute(0, 3, 1, 2).float() / 255.0 divides a contiguous tensor there, as here, with the CPU's values."""
    import torch

    images = torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8)
    got = images.to("neuron").permute(0, 3, 1, 2).float()
    assert images.permute(0, 3, 1, 2).float().stride() == (48, 1, 12, 3) and got.is_contiguous()
    assert torch.equal((got / 255.0).cpu(), images.permute(0, 3, 1, 2).float() / 255.0)
    assert torch.randn(3, 4, device="neuron").t().to(torch.bfloat16).is_contiguous()


def test_a_profile_without_the_to_copy_row_major_rule_keeps_the_stride_order_and_refuses_the_division(rules):
    import torch

    rules(to_copy_row_major=False)
    x = torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8, device="neuron").permute(0, 3, 1, 2).float()
    assert x.stride() == (48, 1, 12, 3)
    with pytest.raises(RuntimeError, match="aten::div.Tensor .*Cannot process non-contiguous tensors"):
        x / 255.0


def test_a_profile_without_the_to_copy_row_major_rule_keeps_a_fallbacks_strides(rules):
    import torch

    rules(to_copy_row_major=False)
    assert torch.nn.functional.hardswish(torch.randn(4, 3, device="neuron").t()).stride() == (1, 3)


def test_a_profile_without_the_row_major_rule_keeps_the_cpus_stride_order(rules):
    import torch

    rules(compiled_results_row_major=False)
    x = torch.randn(4, 3, 2, device="neuron").permute(2, 0, 1)
    assert torch.exp(x).stride() == (1, 6, 2)


def test_the_row_major_rule_says_once_per_op_when_it_changed_a_results_strides(run_python):
    """A later .view() across the permuted dims fails there as here: the warning names the strides the CPU
    would have given, once per op; a contiguous input (strides unchanged) and the rule off say nothing."""
    result = run_python("""
        import dataclasses, warnings, torch, torchferry.device
        from torchferry.device import _runtime, target
        torchferry.device.enable()
        def said(fn):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
            return [str(w.message) for w in caught if "row-major" in str(w.message)]
        x = torch.randn(4, 3, 2, device="neuron")
        print(len(said(lambda: torch.exp(x))))                       # contiguous input: nothing changed
        first = said(lambda: torch.exp(x.permute(2, 0, 1)))
        print(len(first), "[1, 6, 2]" in first[0], "compiled_results_row_major = false" in first[0])
        print(len(said(lambda: torch.exp(x.permute(2, 0, 1)))))      # once per op
        profile = _runtime.profile()
        target.configure(_runtime.core(), dataclasses.replace(
            profile, rules={**profile.rules, "compiled_results_row_major": False}), "warn")
        print(len(said(lambda: torch.sin(x.permute(2, 0, 1)))))      # rule off: the CPU's strides, nothing to say
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "True", "True", "0", "0"]


# ------------------------------------------------------------------ indexed writes with host indices
def test_an_indexed_write_with_a_host_index_raises_torchneurons_error_with_the_fix(neuron):
    # PyTorch's own test_dstack writes `x[torch.randn(shape) > 0.5] = 0` into a device tensor: it fails on Trainium
    import torch

    x = torch.zeros(4, 3, device="neuron")
    mask, rows = torch.tensor([True, False, True, False]), torch.tensor([0, 2])
    for write in (lambda: x.__setitem__(mask, 1.0), lambda: x.index_put_((rows,), torch.ones(3, device="neuron")),
                  lambda: x.index_put_((rows,), torch.ones(3, device="neuron"), accumulate=True)):
        with pytest.raises(RuntimeError) as error:
            write()
        message = str(error.value)
        assert "Non-scalar tensor arg1[0] is on cpu device, expected neuron" in message
        assert "mask.to(x.device)" in message and "host_index_writes" in message
    assert torch.equal(x.cpu(), torch.zeros(4, 3))  # nothing was written


def test_clean_twins_of_host_index_writes_device_indices_0_dim_indices_and_reads_work(neuron):
    import torch

    x = torch.zeros(4, 3, device="neuron")
    mask = torch.tensor([True, False, True, False])
    x[mask.to("neuron")] = 1.0  # the fix
    x[torch.tensor(3)] = 2.0  # a 0-dim host index: a scalar, as on the target
    expected = torch.zeros(4, 3)
    expected[mask], expected[3] = 1.0, 2.0
    assert torch.equal(x.cpu(), expected)
    assert torch.equal(x[mask].cpu(), expected[mask])  # a read takes host indices (IndexMLIRImpl)
    assert torch.equal(x[torch.tensor([0, 3])].cpu(), expected[[0, 3]])


def test_a_profile_without_the_host_index_writes_rule_takes_host_indices_as_cuda_does(rules):
    import torch

    rules(host_index_writes=False)
    x = torch.zeros(4, 3, device="neuron")
    x[torch.tensor([True, False, True, False])] = 1.0
    assert x.cpu()[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]


# ------------------------------------------------------------------ int arguments beyond int32
def test_an_int_argument_beyond_int32_of_a_torch_mlir_op_fails_as_on_torchneuron(neuron):
    # PyTorch's test_random_to / _from_to / _full_range compare draws with bounds such as 2**62 on the device
    import torch

    x = torch.arange(4, device="neuron")
    for call, argument in ((lambda: x < 2**40, "other"), (lambda: x.float() >= -2**53, "other"),
                           (lambda: torch.full((3,), 2**40, device="neuron"), "fill_value")):
        with pytest.raises(RuntimeError) as error:
            call()
        message = str(error.value)
        assert "value cannot be converted to type int32 without overflow" in message
        assert f"argument `{argument}`" in message and "int_arguments_as_int32" in message


def test_clean_twins_of_int32_arguments_ints_within_int32_static_arguments_and_wrapped_numbers_work(neuron):
    import torch

    x = torch.arange(4, device="neuron")
    assert (x < 2**31 - 1).all().item() and (x > -2**31).all().item()
    # fill_.Scalar keeps its value static: no error (its int64 then computes as int32, the 64-bit numerics' business)
    assert x.clone().fill_(2**40).device.type == "neuron"
    assert x.add(x, alpha=3).cpu().tolist() == [0, 4, 8, 12]  # alpha: a static argument of add.Tensor
    assert (x.float() < 2.0**40).all().item()  # a float: a float32 tensor there, no int32 conversion


def test_a_profile_without_the_int32_rule_computes_what_the_cpu_computes(rules):
    import torch

    rules(int_arguments_as_int32=False)
    assert (torch.arange(4, device="neuron") < 2**40).all().item()


# ------------------------------------------------------------------ allocations by numel
# TorchNeuron's empty_strided_neuron allocates numel * itemsize bytes (one element when empty) whatever the
# strides, and empty_neuron lays a tensor out with c10's contiguousStridesOf, which does not clamp sizes of zero
# (csrc/aten/NeuronNativeFunctions.cpp): PyTorch's test_empty_strided and test_empty_tensor_props fail there.
def test_an_empty_tensor_has_unclamped_strides_and_one_element_of_storage(neuron):
    import torch

    assert torch.empty(5, 0).stride() == (1, 1)  # the CPU clamps the zero
    x = torch.empty(5, 0, 3, device="neuron")
    assert x.stride() == (0, 3, 1) and x.is_contiguous()
    assert x.untyped_storage().nbytes() == 4  # one float32 element, where the CPU's storage has none
    assert torch.zeros(2, 0, device="neuron").stride() == (0, 1)  # a fresh result too
    assert torch.ones(3, 4, device="neuron")[:, :0].stride() == (4, 1)  # a view: its own strides, as there


def test_a_strided_allocation_gets_a_storage_of_its_elements_with_one_warning(neuron):
    import torch

    assert torch.empty_strided((2, 3), (5, 1)).untyped_storage().nbytes() == 8 * 4  # the CPU's: the extent
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        padded = torch.empty_strided((2, 3), (5, 1), device="neuron")
    assert padded.untyped_storage().nbytes() == 6 * 4
    (warning,) = [str(c.message) for c in caught if "aten::empty_strided" in str(c.message)]
    assert "reach 8 elements" in warning and "allocations_by_numel = false" in warning
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 24"):
        padded[1]  # a view of the last row: past the storage, as on the target
    padded.copy_(torch.arange(6.0).reshape(2, 3))  # its elements stay writable here, whole
    assert torch.equal(padded.cpu(), torch.arange(6.0).reshape(2, 3))


def test_clean_twins_of_allocations_keep_the_cpus_strides_and_storage(neuron):
    import torch

    for shape in ((2, 3), (4, 1, 5)):
        x = torch.empty(shape, device="neuron")
        assert x.stride() == torch.empty(shape).stride()
        assert x.untyped_storage().nbytes() == torch.empty(shape).untyped_storage().nbytes()
    permuted = torch.empty_strided((3, 4), (1, 3), device="neuron")  # dense: the extent is its elements
    assert permuted.untyped_storage().nbytes() == 12 * 4 and permuted.stride() == (1, 3)
    assert torch.empty(1, 3, 4, 4, memory_format=torch.channels_last, device="neuron").stride() == (48, 1, 12, 3)


def test_a_profile_without_the_allocation_rule_keeps_the_cpus_strides_and_storage(rules):
    import torch

    rules(allocations_by_numel=False)
    assert torch.empty(5, 0, 3, device="neuron").stride() == (3, 3, 1)
    assert torch.empty(0, device="neuron").untyped_storage().nbytes() == 0
    assert torch.empty_strided((2, 3), (5, 1), device="neuron").untyped_storage().nbytes() == 8 * 4


# ------------------------------------------------------------------ compiled_strided_writes_fail
@pytest.mark.parametrize("write", [
    "x[:, 0].fill_(1)",  # a column: stride 4
    "x.t().mul_(2)",  # a transposed tensor
    "x[:, 1:].add_(1)",  # a slice of the last axis
    "torch.nn.init.zeros_(x[:, 0])",
    "torch.relu_(x.t())",  # the boxed path (no unboxed kernel)
    "torch.add(torch.ones(3, 2, device='neuron'), 1, out=x[:, :2])",  # an out= of the result's shape
])
def test_an_in_place_or_out_write_into_a_strided_tensor_fails_as_the_torch_mlir_kernel_does(rules, write):
    import torch

    rules(compiled_strided_writes_fail=True)
    x = torch.zeros(3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="Cannot process non-contiguous tensors") as error:
        eval(write, {"torch": torch, "x": x})
    assert "CPU fallback disabled" in str(error.value) and "strides" in str(error.value)
    assert "copy_(result)" in str(error.value)  # the fix
    assert torch.equal(x.cpu(), torch.zeros(3, 4))  # nothing written


def test_strided_writes_trainium_takes_twin_pass(rules):
    import torch

    rules(compiled_strided_writes_fail=True)
    x = torch.zeros(3, 4, device="neuron")
    x[:, 0] = 1  # a copy: TorchNeuron's copy_ writes through the strides
    x[:, 1].copy_(torch.full((3,), 2.0, device="neuron"))
    x[1:].add_(1)  # a contiguous view
    expected = torch.zeros(3, 4)
    expected[:, 0] = 1
    expected[:, 1] = 2
    expected[1:] += 1
    assert torch.equal(x.cpu(), expected)
    wide = torch.zeros(3, 4, dtype=torch.float64, device="neuron")
    wide[:, 0].fill_(1)  # 64-bit: computed in a fresh 32-bit tensor, then copied in
    assert torch.equal(wide.cpu()[:, 0], torch.ones(3, dtype=torch.float64))
    out = torch.zeros(2, 3, device="neuron")
    torch.arange(0, 4, out=out.narrow(1, 1, 2))  # another shape: resized (contiguous) first
    torch.zeros(0, 4, device="neuron").t().add_(1)  # empty: nothing executes
    v = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert torch.equal(torch.vander(v.to("neuron")).cpu(), torch.vander(v))  # a float64 result (float32's: refused)


@pytest.mark.parametrize("call", [
    "x.t() == y.t()",  # eq.Tensor: TorchNeuron registers eq.Tensor_out only
    "x.t() > 0",  # gt.Scalar
    "x.t() / y.t()",  # div.Tensor -> div.out
    "x.t() / 2.0",  # a Python number is a wrapped 0-dim tensor: div.Tensor
    "x.t() ** 2",  # pow.Tensor_Scalar -> pow.Tensor_Scalar_out
    "torch.isclose(x.t(), y.t())",  # assert_close's comparison
    "torch.zeros_like(x.t())",  # empty_like keeps the stride order, then zero_ in place
    "x.long().t() == 1",  # int64 inputs, but the result is bool: the kernel's own output
])
def test_a_functional_op_registered_only_as_its_out_kernel_fails_on_a_permuted_input(neuron, call):
    import torch

    x, y = torch.randn(3, 4, device="neuron"), torch.randn(3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="Cannot process non-contiguous tensors") as error:
        eval(call, {"torch": torch, "x": x, "y": y})
    assert "CPU fallback disabled" in str(error.value)
    if "zeros_like" not in call:
        assert "registers only this op's out= variant" in str(error.value) and "x.contiguous()" in str(error.value)


def test_functional_twins_of_a_permuted_input_pass(neuron):
    import torch

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    dx, dy = x.to("neuron"), y.to("neuron")
    twins = {  # each gives the CPU's values
        "registered functional ops: a fresh row-major result": lambda a, b: (a.t() + b.t(), a.t() * 2, a.t().exp()),
        "contiguous inputs": lambda a, b: (a == b, a / b, a.t().contiguous() / 2.0),
        "64-bit results: computed in a fresh 32-bit tensor": lambda a, b: (a.t().double() / 2.0,),
        "ones_like: TorchNeuron's own kernel": lambda a, b: (torch.ones_like(a.t()),),
        "a permuted tensor on the host": lambda a, b: (a.t().cpu() == b.t().cpu(),),
    }
    for name, make in twins.items():
        for got, expected in zip(make(dx, dy), make(x, y)):
            assert torch.equal(got.cpu(), expected), name
    assert torch.ones_like(dx.t()).is_contiguous()


def test_a_profile_without_compiled_strided_writes_fail_writes_through_the_view_and_keeps_the_cpus_strides(rules):
    import torch

    rules(compiled_strided_writes_fail=False)
    x = torch.zeros(3, 4, device="neuron")
    x[:, 0].fill_(1)
    x.t().mul_(2)
    assert torch.equal(x.cpu()[:, 0], torch.full((3,), 2.0)) and torch.equal(x.cpu()[:, 1:], torch.zeros(3, 3))
    y = torch.randn(3, 4)
    assert (y.to("neuron").t() / 2.0).stride() == (y.t() / 2.0).stride() == (1, 4)
    assert torch.zeros_like(y.to("neuron").t()).stride() == (1, 4)
