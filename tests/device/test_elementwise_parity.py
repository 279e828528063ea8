"""The elementwise ops of csrc/Unboxed.cpp give the CPU's results on the device: the same bits, dtype,
shape, strides and errors, for every layout, dtype and argument kind a training step passes them.

Why: these ops (add, sub, mul, div, their in-place forms, neg, rsqrt, sqrt, silu, exp, tanh, sigmoid,
sin, cos, lerp_.Scalar, addcmul_, addcdiv_) are being moved from "the CPU kernel on host views" to
PyTorch's structured CPU kernels (TensorIterator) run on device tensors with device-allocated outputs.
That must change no result. This file pins today's results so that any difference the new path brings
fails here, not in a user's model.

The documented differences from the CPU are two profile rules (tests/device/test_target_rules.py):
- `compiled_results_row_major`: a functional op TorchNeuron runs through its torch-mlir kernel returns a
  fresh row-major result, where the CPU's TensorIterator gives a permuted input's stride order to the result.
  ROW_MAJOR below lists the ops of this file it applies to; with the rule off they keep the CPU's strides.
- `compiled_strided_writes_fail`: an in-place write into a non-contiguous 32-bit tensor, and `div` of a
  permuted input (TorchNeuron registers only `div.out`, so the result keeps the inputs' stride order and is
  that kernel's out=), are refused. The layout tests below switch it off: they pin the CPU kernels' results
  the device computes when a profile lets these calls through.

64-bit values: under the default target numerics (tests/device/test_numerics.py) an int64/float64 input
and a Python float scalar are rounded to 32 bits, the op computes, and the 64-bit result is rounded to 32
bits; under host numerics they are the CPU's bits. Both are pinned below.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest
import torch

F = torch.nn.functional

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------ the ops
BINARY: dict[str, Callable] = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
UNARY: dict[str, Callable] = {
    "neg": torch.neg, "rsqrt": torch.rsqrt, "sqrt": torch.sqrt, "silu": F.silu, "exp": torch.exp,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos,
}
# In place: self, the other tensor (the one the layouts vary) and a third tensor for the ternary ops.
INPLACE: dict[str, Callable] = {
    "add_": lambda s, o, e: s.add_(o),
    "sub_": lambda s, o, e: s.sub_(o),
    "mul_": lambda s, o, e: s.mul_(o),
    "div_": lambda s, o, e: s.div_(o),
    "lerp_.Scalar": lambda s, o, e: s.lerp_(o, 0.3),  # lerp_ with a tensor weight is another overload
    "addcmul_": lambda s, o, e: s.addcmul_(o, e, value=0.5),
    "addcdiv_": lambda s, o, e: s.addcdiv_(o, e, value=-0.5),
}
# The functional ops the row-major rule applies to (the profile's row_major_ops; the test below checks it).
# Not div: TorchNeuron registers div.out from its torch-mlir kernel and div.Tensor reaches it through
# PyTorch's structured delegate, which allocates the result with the CPU's strides.
ROW_MAJOR = {"add", "sub", "mul", "neg", "rsqrt", "sqrt", "silu", "exp", "tanh", "sigmoid", "sin", "cos"}
ATEN_NAMES = {"add": "aten::add.Tensor", "sub": "aten::sub.Tensor", "mul": "aten::mul.Tensor",
              "div": "aten::div.Tensor", **{op: f"aten::{op}" for op in UNARY}}

# Zeros of both signs, infinities, NaN, denormals, the float32 range's edge: bit-level behaviour.
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, -1.0, 1.0, 3e38, -2.5, 0.5]


# ------------------------------------------------------------------ helpers
def _gen(shape, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded CPU tensor (randn * 4, cast: integers get a spread of values, bools both values)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 4
    return x > 0 if dtype == torch.bool else x.to(dtype)


def _specials(shift: int) -> torch.Tensor:
    return torch.tensor(SPECIALS).roll(shift).reshape(3, 4)


def _on(device: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """Moves a CPU-generated tensor to `device`; views are taken after the move, on the device."""
    return (lambda t: t) if device == "cpu" else (lambda t: t.to(device))


def _outcome(call: Callable):
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return None, exc


def _assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    g, e = got.cpu().contiguous(), expected.contiguous()
    torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True)  # a readable message first
    if g.is_floating_point():  # then the bits: the sign of a zero, a NaN's payload
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
        assert torch.equal(g.view(as_int), e.view(as_int))
    else:
        assert torch.equal(g, e)


def _row_major_strides(t: torch.Tensor) -> tuple[int, ...]:
    return torch.empty(t.shape).stride()


def _assert_cpus_layout(op: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """The CPU's strides, but a row-major result where the rule applies and the CPU's is not."""
    if op in ROW_MAJOR and not expected.is_contiguous():
        assert got.stride() == _row_major_strides(expected), (got.stride(), expected.stride())
    else:
        assert got.stride() == expected.stride()


def _assert_same_outcome(op: str, cpu_call: Callable, device_call: Callable) -> None:
    expected, cpu_error = _outcome(cpu_call)
    got, device_error = _outcome(device_call)
    if cpu_error is not None or device_error is not None:
        assert type(device_error) is type(cpu_error), (cpu_error, device_error)
        assert str(device_error) == str(cpu_error)
        return
    _assert_same_bits(got, expected)
    _assert_cpus_layout(op, got, expected)


# ------------------------------------------------------------------ functional ops: layouts
def _binary_layouts() -> dict[str, Callable]:
    """name -> (move -> (a, b)): the same values on either device."""
    return {
        "contiguous": lambda m: (m(_gen((4, 5), 0)), m(_gen((4, 5), 1))),
        "broadcast (4,1) op (1,5)": lambda m: (m(_gen((4, 1), 0)), m(_gen((1, 5), 1))),
        "transposed self": lambda m: (m(_gen((5, 4), 0)).t(), m(_gen((4, 5), 1))),
        "transposed other": lambda m: (m(_gen((4, 5), 0)), m(_gen((5, 4), 1)).t()),
        "both transposed": lambda m: (m(_gen((5, 4), 0)).t(), m(_gen((5, 4), 1)).t()),
        # Both channels-last: TensorIterator's one-dimensional fast set-up (a ConvNeXt block's residual add).
        "both channels_last": lambda m: (_channels_last(m, 0), _channels_last(m, 1)),
        "permuted 3-d self": lambda m: (m(_gen((4, 3, 2), 0)).permute(2, 0, 1), m(_gen((2, 4, 3), 1))),
        "sliced self x[:, ::2]": lambda m: (m(_gen((4, 10), 0))[:, ::2], m(_gen((4, 5), 1))),
        "expanded other (stride 0)": lambda m: (m(_gen((4, 5), 0)), m(_gen((5,), 1)).expand(4, 5)),
        "0-dim device other": lambda m: (m(_gen((4, 5), 0)), m(_gen((), 1))),
        "0-dim device self": lambda m: (m(_gen((), 0)), m(_gen((4, 5), 1))),
        "both 0-dim": lambda m: (m(_gen((), 0)), m(_gen((), 1))),
        "empty (0, 3)": lambda m: (m(_gen((0, 3), 0)), m(_gen((0, 3), 1))),
        "empty op broadcast (1, 3)": lambda m: (m(_gen((0, 3), 0)), m(_gen((1, 3), 1))),
        "special values": lambda m: (m(_specials(0)), m(_specials(5))),
    }


def _channels_last(move: Callable[[torch.Tensor], torch.Tensor], seed: int) -> torch.Tensor:
    """A (2, 3, 4, 5) tensor in channels-last memory order, made as a model makes it: a permuted view."""
    return move(_gen((2, 4, 5, 3), seed)).permute(0, 3, 1, 2)


def _unary_layouts() -> dict[str, Callable]:
    return {
        "contiguous": lambda m: m(_gen((4, 5), 0)),
        "transposed": lambda m: m(_gen((5, 4), 0)).t(),
        "permuted 3-d": lambda m: m(_gen((4, 3, 2), 0)).permute(2, 0, 1),
        "channels_last": lambda m: _channels_last(m, 0),
        "sliced x[:, ::2]": lambda m: m(_gen((4, 10), 0))[:, ::2],
        "expanded (stride 0)": lambda m: m(_gen((5,), 0)).expand(4, 5),
        "0-dim": lambda m: m(_gen((), 0)),
        "empty (0, 3)": lambda m: m(_gen((0, 3), 0)),
        "special values": lambda m: m(_specials(0)),
    }


def _no_empty_input_warning(call: Callable):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert [str(w.message) for w in caught if "empty tensor input" in str(w.message)] == []
    return result


@pytest.mark.parametrize("layout", list(_binary_layouts()))
@pytest.mark.parametrize("op", list(BINARY))
def test_a_binary_op_gives_the_cpus_bits_dtype_and_strides_for_each_layout(rules, op, layout):
    rules(compiled_strided_writes_fail=False)  # div of a permuted input: refused under it (docstring)
    make = _binary_layouts()[layout]
    expected = BINARY[op](*make(_on("cpu")))
    got = _no_empty_input_warning(lambda: BINARY[op](*make(_on("neuron"))))
    _assert_same_bits(got, expected)
    _assert_cpus_layout(op, got, expected)


@pytest.mark.parametrize("layout", list(_unary_layouts()))
@pytest.mark.parametrize("op", list(UNARY))
def test_a_unary_op_gives_the_cpus_bits_dtype_and_strides_for_each_layout(neuron, op, layout):
    make = _unary_layouts()[layout]
    expected = UNARY[op](make(_on("cpu")))
    got = _no_empty_input_warning(lambda: UNARY[op](make(_on("neuron"))))
    _assert_same_bits(got, expected)
    _assert_cpus_layout(op, got, expected)


def test_the_row_major_rule_makes_a_transposed_inputs_result_contiguous_for_mul_but_not_for_div(rules):
    # The two sides of ROW_MAJOR in one place (the parametrized tests above assert each op).
    x, y = _gen((5, 4), 0), _gen((4, 5), 1)
    assert (x.t() * y).stride() == (1, 4) and (x.t() / y).stride() == (1, 4)  # the CPU
    d = x.to("neuron").t()
    assert (d * y.to("neuron")).stride() == (5, 1)
    # div.Tensor is PyTorch's composite of TorchNeuron's div.out: the result keeps (1, 4) and, handed to
    # that kernel as out=, is refused (compiled_strided_writes_fail); with the rule off it is the CPU's.
    with pytest.raises(RuntimeError, match="Cannot process non-contiguous tensors"):
        d / y.to("neuron")
    rules(compiled_strided_writes_fail=False)
    assert (d / y.to("neuron")).stride() == (1, 4)


def test_an_empty_input_gives_the_cpus_empty_result_and_no_zeros_warning(neuron):
    """The empty_inputs rule makes an op TorchNeuron compiles return zeros of the result's shape when a
    positional input is empty. For these elementwise ops the result is then empty too, so the rule has
    nothing to zero: the CPU's empty result, its strides, and no warning (asserted for every op above)."""
    x = _gen((0, 3), 0)
    got = _no_empty_input_warning(lambda: torch.exp(x.to("neuron")) * x.to("neuron"))
    assert got.shape == (0, 3) and got.stride() == (3, 1) and got.device.type == "neuron"


@pytest.mark.parametrize("op", sorted(ROW_MAJOR))
def test_without_the_row_major_rule_a_permuted_input_keeps_the_cpus_stride_order(rules, op):
    rules(compiled_results_row_major=False)
    for layout in ("transposed self", "permuted 3-d self") if op in BINARY else ("transposed", "permuted 3-d"):
        if op in BINARY:
            make = _binary_layouts()[layout]
            expected, got = BINARY[op](*make(_on("cpu"))), BINARY[op](*make(_on("neuron")))
        else:
            make = _unary_layouts()[layout]
            expected, got = UNARY[op](make(_on("cpu"))), UNARY[op](make(_on("neuron")))
        assert not expected.is_contiguous()
        _assert_same_bits(got, expected)
        assert got.stride() == expected.stride(), layout


def test_the_row_major_ops_here_are_the_ones_the_profile_lists(neuron):
    from torchferry.device import _runtime, profile

    listed = set(profile.row_major_ops(_runtime.profile().native_ops.native))
    assert {op for op, name in ATEN_NAMES.items() if name in listed} == ROW_MAJOR


# ------------------------------------------------------------------ numbers, CPU scalars, type promotion
def _scalar_calls() -> dict[str, tuple[Callable, Callable]]:
    """name -> (move -> inputs, op). Python numbers and 0-dim CPU tensors mixed with device tensors."""
    f32 = lambda m: (m(_gen((4, 5), 0)), m(_gen((4, 5), 1)))  # noqa: E731
    i32 = lambda m: (m(_gen((4, 5), 0, torch.int32)),)  # noqa: E731
    return {
        "a * 0.5": (f32, lambda a, b: a * 0.5),
        "a + 2": (f32, lambda a, b: a + 2),
        "a - 1.5": (f32, lambda a, b: a - 1.5),
        "a / 3": (f32, lambda a, b: a / 3),
        "a.add(b, alpha=2)": (f32, lambda a, b: a.add(b, alpha=2)),
        "a.sub(b, alpha=0.5)": (f32, lambda a, b: a.sub(b, alpha=0.5)),
        "a * torch.tensor(2.0) (0-dim CPU)": (f32, lambda a, b: a * torch.tensor(2.0)),
        "torch.tensor(2.0) * a (0-dim CPU self)": (f32, lambda a, b: torch.tensor(2.0) * a),
        "a / torch.tensor(3.0) (0-dim CPU)": (f32, lambda a, b: a / torch.tensor(3.0)),
        "a + torch.tensor(3) (0-dim CPU int)": (f32, lambda a, b: a + torch.tensor(3)),
        "float32 * 3 (int number)": (f32, lambda a, b: a * 3),
        "float32 * torch.tensor(3) (0-dim CPU int)": (f32, lambda a, b: a * torch.tensor(3)),
        "int32 * 2.5": (i32, lambda i: i * 2.5),
        "int32 / 3": (i32, lambda i: i / 3),
        "int32 + 7": (i32, lambda i: i + 7),
        "int32 + torch.tensor(0.5) (0-dim CPU float)": (i32, lambda i: i + torch.tensor(0.5)),
        "int32.add(int32, alpha=0.5) raises": (i32, lambda i: i.add(i, alpha=0.5)),
        "float16 * torch.tensor(1e-4) (0-dim CPU float32)": (
            lambda m: (m(_gen((4, 5), 0, torch.float16)),), lambda h: h * torch.tensor(1e-4)),
        "bfloat16 * 0.1": (lambda m: (m(_gen((4, 5), 0, torch.bfloat16)),), lambda h: h * 0.1),
        "bool + 1.5": (lambda m: (m(_gen((4, 5), 0, torch.bool)),), lambda x: x + 1.5),
    }


@pytest.mark.parametrize("case", list(_scalar_calls()))
def test_numbers_and_0_dim_cpu_tensors_give_the_cpus_result(neuron, case):
    make, op = _scalar_calls()[case]
    # contiguous inputs: no row-major case, the CPU's strides exactly
    _assert_same_outcome(case, lambda: op(*make(_on("cpu"))), lambda: op(*make(_on("neuron"))))


# (dtype of a, dtype of b); "0-dim:" makes b a 0-dim device tensor (it does not promote a dimensioned
# tensor of its category).
PROMOTIONS = [
    ("int32", "float32"), ("float32", "int32"), ("float16", "float32"), ("bfloat16", "float16"),
    ("float16", "float16"), ("bfloat16", "bfloat16"), ("bool", "bool"), ("bool", "float32"),
    ("uint8", "int8"), ("int32", "int32"), ("int32", "bool"),
    ("float16", "0-dim:float32"), ("int32", "0-dim:float32"), ("bool", "0-dim:int32"), ("bfloat16", "0-dim:int32"),
]


@pytest.mark.filterwarnings("ignore:.*is a known issue of TorchNeuron")  # the profile's note, not a result
@pytest.mark.parametrize("dtypes", PROMOTIONS, ids=lambda d: "-".join(d))
@pytest.mark.parametrize("op", list(BINARY))
def test_type_promotion_and_dtype_errors_of_binary_ops_are_the_cpus(neuron, op, dtypes):
    a_dtype, b_spec = dtypes
    b_shape = () if b_spec.startswith("0-dim:") else (4, 5)
    b_dtype = getattr(torch, b_spec.removeprefix("0-dim:"))

    def run(m):
        return BINARY[op](m(_gen((4, 5), 0, getattr(torch, a_dtype))), m(_gen(b_shape, 1, b_dtype)))

    _assert_same_outcome(op, lambda: run(_on("cpu")), lambda: run(_on("neuron")))


@pytest.mark.filterwarnings("ignore:.*is a known issue of TorchNeuron")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "bool"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_ops_on_other_dtypes_give_the_cpus_result_or_error(neuron, op, dtype):
    # e.g. silu of int32 and neg of bool raise on the CPU: the same error here
    def run(m):
        return UNARY[op](m(_gen((4, 5), 0, getattr(torch, dtype))))

    _assert_same_outcome(op, lambda: run(_on("cpu")), lambda: run(_on("neuron")))


def test_the_errors_compared_above_are_raised_by_the_cpu(neuron):
    # So the outcome comparisons above do compare errors, not only results.
    for call in (lambda: -_gen(3, 0, torch.bool), lambda: F.silu(_gen(3, 0, torch.int32)),
                 lambda: _gen(3, 0, torch.bool) - _gen(3, 1, torch.bool)):
        assert _outcome(call)[1] is not None


# ------------------------------------------------------------------ in place
def _inplace_layouts() -> dict[str, Callable]:
    """name -> (move -> (base, view of base written in place, other, third))."""
    full = lambda m, seed: m(_gen((4, 5), seed))  # noqa: E731
    same = lambda t: t  # noqa: E731
    return {
        "contiguous": lambda m: (full(m, 0), same, full(m, 1), full(m, 2)),
        "other broadcast (5,)": lambda m: (full(m, 0), same, m(_gen((5,), 1)), m(_gen((4, 1), 2))),
        "other expanded (stride 0)": lambda m: (full(m, 0), same, m(_gen((5,), 1)).expand(4, 5),
                                                m(_gen((4, 1), 2)).expand(4, 5)),
        "other 0-dim device": lambda m: (full(m, 0), same, m(_gen((), 1)), m(_gen((), 2))),
        "self transposed view": lambda m: (m(_gen((5, 4), 0)), lambda t: t.t(), full(m, 1), full(m, 2)),
        "self sliced view x[:, ::2]": lambda m: (m(_gen((4, 10), 0)), lambda t: t[:, ::2], full(m, 1), full(m, 2)),
        "all channels_last": lambda m: (m(_gen((2, 4, 5, 3), 0)), lambda t: t.permute(0, 3, 1, 2),
                                        _channels_last(m, 1), _channels_last(m, 2)),
        "self 0-dim": lambda m: (m(_gen((), 0)), same, m(_gen((), 1)), m(_gen((), 2))),
        "empty (0, 3)": lambda m: (m(_gen((0, 3), 0)), same, m(_gen((0, 3), 1)), m(_gen((0, 3), 2))),
        "special values": lambda m: (m(_specials(0)), same, m(_specials(5)), m(_specials(3))),
        "self shape (5,) other (4, 5): broadcast error": lambda m: (m(_gen((5,), 0)), same, full(m, 1), full(m, 2)),
        "self is other": lambda m: (full(m, 0), same, None, full(m, 2)),
    }


def _run_inplace(op: str, layout: str, device: str):
    base, view, other, third = _inplace_layouts()[layout](_on(device))
    target = view(base)
    result, error = _outcome(lambda: INPLACE[op](target, target if other is None else other, third))
    return base, target, result, error


def _assert_same_inplace(run: Callable[[str], tuple]) -> None:
    """The CPU's result written into self (same tensor returned, same strides), the base viewed through
    it, or the CPU's error with self untouched."""
    c_base, c_self, c_result, c_error = run("cpu")
    d_base, d_self, d_result, d_error = run("neuron")
    assert type(d_error) is type(c_error), (c_error, d_error)
    assert str(d_error) == str(c_error)
    if c_error is None:
        assert d_result is d_self
    _assert_same_bits(d_self, c_self)
    assert d_self.stride() == c_self.stride()
    _assert_same_bits(d_base, c_base)
    assert d_base.stride() == c_base.stride()


@pytest.mark.parametrize("layout", list(_inplace_layouts()))
@pytest.mark.parametrize("op", list(INPLACE))
def test_an_in_place_op_writes_the_cpus_bits_into_self_and_its_base(rules, op, layout):
    rules(compiled_strided_writes_fail=False)  # a strided self: refused under it (docstring)
    _assert_same_inplace(lambda device: _run_inplace(op, layout, device))


def test_an_in_place_write_into_a_transposed_view_lands_in_the_base(rules):
    # The layouts above compare with the CPU; this says what that means for one case.
    rules(compiled_strided_writes_fail=False)
    base = torch.zeros(5, 4, device="neuron")
    view = base.t()
    assert view.add_(torch.arange(20.0).reshape(4, 5).to("neuron")) is view
    assert view.stride() == (1, 4)
    assert torch.equal(base.cpu(), torch.arange(20.0).reshape(4, 5).t())


def _inplace_scalar_calls() -> dict[str, tuple[Callable, Callable]]:
    f32 = lambda m: (m(_gen((4, 5), 0)), m(_gen((4, 5), 1)))  # noqa: E731
    i32 = lambda m: (m(_gen((4, 5), 0, torch.int32)), m(_gen((4, 5), 1, torch.int32)))  # noqa: E731
    return {
        "a.add_(b, alpha=2)": (f32, lambda a, b: a.add_(b, alpha=2)),
        "a.sub_(b, alpha=0.5)": (f32, lambda a, b: a.sub_(b, alpha=0.5)),
        "a.add_(1)": (f32, lambda a, b: a.add_(1)),
        "a.mul_(0.5)": (f32, lambda a, b: a.mul_(0.5)),
        "a.div_(3)": (f32, lambda a, b: a.div_(3)),
        "a.mul_(torch.tensor(2.0)) (0-dim CPU)": (f32, lambda a, b: a.mul_(torch.tensor(2.0))),
        "a.div_(torch.tensor(3.0)) (0-dim CPU)": (f32, lambda a, b: a.div_(torch.tensor(3.0))),
        "a.addcmul_(b, b, value=0.1)": (f32, lambda a, b: a.addcmul_(b, b, value=0.1)),
        "a.addcdiv_(b, b.abs(), value=2)": (f32, lambda a, b: a.addcdiv_(b, b.abs(), value=2)),
        "a.lerp_(b, 0.7)": (f32, lambda a, b: a.lerp_(b, 0.7)),
        "int32.add_(int32, alpha=3)": (i32, lambda i, j: i.add_(j, alpha=3)),
        "int32.mul_(3)": (i32, lambda i, j: i.mul_(3)),
        "int32.mul_(0.5) raises": (i32, lambda i, j: i.mul_(0.5)),
        "int32.div_(2) raises": (i32, lambda i, j: i.div_(2)),
        "int32.sub_(int32, alpha=0.5) raises": (i32, lambda i, j: i.sub_(j, alpha=0.5)),
        "int32.addcmul_(int32, int32, value=2)": (i32, lambda i, j: i.addcmul_(j, j, value=2)),
        "int32.lerp_(int32, 0.5) raises": (i32, lambda i, j: i.lerp_(j, 0.5)),
    }


@pytest.mark.parametrize("case", list(_inplace_scalar_calls()))
def test_in_place_with_numbers_and_0_dim_cpu_tensors_gives_the_cpus_result(neuron, case):
    make, op = _inplace_scalar_calls()[case]

    def run(device):
        args = make(_on(device))
        result, error = _outcome(lambda: op(*args))
        return args[0], args[0], result, error

    _assert_same_inplace(run)


# (self dtype, other dtype): the third tensor has other's dtype.
INPLACE_DTYPES = [
    ("float16", "float32"), ("float32", "float16"), ("bfloat16", "bfloat16"), ("float16", "float16"),
    ("int32", "int32"), ("bool", "bool"), ("uint8", "uint8"), ("int32", "float32"), ("bool", "float32"),
]


@pytest.mark.filterwarnings("ignore:.*is a known issue of TorchNeuron")
@pytest.mark.parametrize("dtypes", INPLACE_DTYPES, ids=lambda d: "-".join(d))
@pytest.mark.parametrize("op", list(INPLACE))
def test_in_place_dtype_casts_and_refusals_are_the_cpus(neuron, op, dtypes):
    s_dtype, o_dtype = (getattr(torch, d) for d in dtypes)

    def run(device):
        m = _on(device)
        # the third tensor (addcdiv_'s divisor) is kept away from zero where its dtype allows
        third = _gen((4, 5), 2, o_dtype) if o_dtype == torch.bool else (_gen((4, 5), 2).abs() + 0.5).to(o_dtype)
        s, o, e = m(_gen((4, 5), 0, s_dtype)), m(_gen((4, 5), 1, o_dtype)), m(third)
        result, error = _outcome(lambda: INPLACE[op](s, o, e))
        return s, s, result, error

    _assert_same_inplace(run)


def test_int32_add_of_a_float_tensor_raises_the_cpus_error_and_leaves_self(neuron):
    i, f = _gen((4, 5), 0, torch.int32), _gen((4, 5), 1)
    with pytest.raises(RuntimeError) as on_cpu:
        i.clone().add_(f)
    d = i.to("neuron")
    with pytest.raises(RuntimeError) as on_device:
        d.add_(f.to("neuron"))
    assert str(on_device.value) == str(on_cpu.value) == "result type Float can't be cast to the desired output type Int"
    assert torch.equal(d.cpu(), i)


def test_addcdiv_of_integer_tensors_raises_the_cpus_error(neuron):
    i, j = _gen((4, 5), 0, torch.int32), _gen((4, 5), 1, torch.int32).abs() + 1
    with pytest.raises(RuntimeError) as on_cpu:
        i.clone().addcdiv_(j, j)
    d, dj = i.to("neuron"), j.to("neuron")
    with pytest.raises(RuntimeError) as on_device:
        d.addcdiv_(dj, dj)
    assert type(on_device.value) is type(on_cpu.value)
    assert str(on_device.value) == str(on_cpu.value)
    assert str(on_cpu.value).startswith("Integer division with addcdiv is no longer supported")
    assert torch.equal(d.cpu(), i)


# ------------------------------------------------------------------ 64-bit values
def _round32(t: torch.Tensor) -> torch.Tensor:
    """What target numerics does to a 64-bit value: the nearest 32-bit one (int64 wraps as int32)."""
    if t.dtype == torch.float64:
        return t.float().double()
    if t.dtype == torch.int64:
        return t.int().long()
    return t


def _f32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32))


# name -> op(self, other, third, scalar) and its Python float scalar; in place when the op's name ends in _.
WIDE_OPS: dict[str, tuple[Callable, float]] = {
    **{op: (lambda s, o, e, v, f=f: f(s, o), 0.0) for op, f in BINARY.items()},
    **{op: (lambda s, o, e, v, f=f: f(s), 0.0) for op, f in UNARY.items()},
    "add(alpha=0.1)": (lambda s, o, e, v: s.add(o, alpha=v), 0.1),
    "mul by 0.1": (lambda s, o, e, v: s * v, 0.1),
    "add_": (lambda s, o, e, v: s.add_(o), 0.0),
    "sub_(alpha=0.1)": (lambda s, o, e, v: s.sub_(o, alpha=v), 0.1),
    "mul_": (lambda s, o, e, v: s.mul_(o), 0.0),
    "div_": (lambda s, o, e, v: s.div_(o), 0.0),
    "lerp_.Scalar": (lambda s, o, e, v: s.lerp_(o, v), 0.3),
    "addcmul_": (lambda s, o, e, v: s.addcmul_(o, e, value=v), 0.3),
    "addcdiv_": (lambda s, o, e, v: s.addcdiv_(o, e, value=v), -0.3),
}
# int64 ops that keep int64 (true division gives float32, silu/lerp_/addcdiv_ refuse integers).
INT64_OPS = ["add", "sub", "mul", "neg", "add_", "mul_", "addcmul_"]
INT64_VALUES = [2**31 - 1, 2**40 + 3, -5, 7, -(2**33), 123456]


def _wide_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if dtype == torch.int64:
        v = torch.tensor(INT64_VALUES)
        return v, v.roll(2), v.roll(4)
    s, o = _gen((4, 5), 0, dtype), _gen((4, 5), 1, dtype)
    return s, o, _gen((4, 5), 2, dtype).abs() + 0.5


def _wide_cases():
    yield from ((op, "float64") for op in WIDE_OPS)
    yield from ((op, "int64") for op in INT64_OPS)


def _run_wide(op: str, inputs, scalar: float, device: str) -> torch.Tensor:
    s, o, e = (t.clone().to(device) for t in inputs)
    result = WIDE_OPS[op][0](s, o, e, scalar)
    assert (result is s) == op.split("(")[0].split(".")[0].endswith("_")  # in place: self returned
    return result


@pytest.mark.parametrize("op, dtype", list(_wide_cases()))
def test_64_bit_values_give_the_cpus_bits_under_host_numerics(numerics, op, dtype):
    numerics("host")
    inputs, scalar = _wide_inputs(getattr(torch, dtype)), WIDE_OPS[op][1]
    expected = _run_wide(op, inputs, scalar, "cpu")
    got = _run_wide(op, inputs, scalar, "neuron")
    _assert_same_bits(got, expected)
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("op, dtype", list(_wide_cases()))
def test_64_bit_values_under_target_numerics_compute_from_and_round_to_32_bits(numerics, op, dtype):
    """Each 64-bit input and Python float scalar is rounded to 32 bits, the op computes at 64 bits on the
    CPU, and a 64-bit result is rounded to 32 bits: bit for bit, and the dtype stays 64-bit."""
    numerics("target")
    inputs, scalar = _wide_inputs(getattr(torch, dtype)), WIDE_OPS[op][1]
    model = _round32(_run_wide(op, [_round32(t) for t in inputs], _f32(scalar), "cpu"))
    got = _run_wide(op, inputs, scalar, "neuron")
    _assert_same_bits(got, model)
    assert got.stride() == model.stride()


def test_target_numerics_visibly_differ_from_the_cpu_on_these_inputs(numerics):
    # So the model above is not the CPU's own result in disguise.
    numerics("target")
    f, o, _ = _wide_inputs(torch.float64)
    assert not torch.equal((f.to("neuron") * o.to("neuron")).cpu(), f * o)
    v = torch.tensor(INT64_VALUES)
    assert (v.to("neuron") + 1).cpu().tolist()[1] == 4 != (v + 1).tolist()[1]


# ------------------------------------------------------------------ autograd
AUTOGRAD_OPS: dict[str, Callable] = {
    "add": lambda x, y: torch.add(x, y, alpha=2), "mul": torch.mul, "div": torch.div,
    "silu": lambda x, y: F.silu(x) * y, "sqrt": lambda x, y: torch.sqrt(x) * y,
}


@pytest.mark.parametrize("layout", ["contiguous", "broadcast other (1, 5)", "transposed self"])
@pytest.mark.parametrize("op", list(AUTOGRAD_OPS))
def test_gradients_are_the_cpus_bits(rules, op, layout):
    rules(compiled_strided_writes_fail=False)  # div of a transposed input: refused under it (docstring)

    def run(device):
        x = _gen((5, 4) if layout == "transposed self" else (4, 5), 0).abs() + 0.5
        y = _gen((1, 5) if layout.startswith("broadcast") else (4, 5), 1).abs() + 0.5
        x, y = x.to(device).requires_grad_(), y.to(device).requires_grad_()
        out = AUTOGRAD_OPS[op](x.t() if layout == "transposed self" else x, y)
        out.backward(_gen((4, 5), 2).to(device))
        return out.detach(), x.grad, y.grad

    expected, got = run("cpu"), run("neuron")
    for g, e in zip(got, expected):
        _assert_same_bits(g, e)


# ------------------------------------------------------------------ accounting
def test_a_mul_and_an_add_are_counted_as_exactly_those_two_ops(neuron):
    a, b = torch.ones(4, 5, device="neuron"), torch.ones(4, 5, device="neuron")
    neuron.clear_op_tracking()
    a * b
    a.add_(b)
    assert neuron.get_executed_ops() == {"aten::mul.Tensor": 1, "aten::add_.Tensor": 1}
    assert neuron.get_fallback_ops() == {}


def _counted_calls() -> dict[str, tuple[Callable, dict[str, int]]]:
    """Calls whose kernel may need internal work (a row-major copy, a dtype cast, a wrapped number):
    only the op itself is counted. An in-place refusal is counted too (it is accounted before the kernel)."""
    return {
        "transposed * b (row-major result)": (lambda a, t, i, h: t * a, {"aten::mul.Tensor": 1}),
        "exp of a transposed input": (lambda a, t, i, h: t.exp(), {"aten::exp": 1}),
        "int32 + float32": (lambda a, t, i, h: i + a, {"aten::add.Tensor": 1}),
        "float16 * float32": (lambda a, t, i, h: h * a, {"aten::mul.Tensor": 1}),
        "a * 0.5": (lambda a, t, i, h: a * 0.5, {"aten::mul.Tensor": 1}),
        "a / 0-dim CPU tensor": (lambda a, t, i, h: a / torch.tensor(2.0), {"aten::div.Tensor": 1}),
        "float16.add_(float32)": (lambda a, t, i, h: h.add_(a), {"aten::add_.Tensor": 1}),
        "transposed.mul_(a) refused": (lambda a, t, i, h: _outcome(lambda: t.mul_(a)), {"aten::mul_.Tensor": 1}),
        "lerp_": (lambda a, t, i, h: a.lerp_(t, 0.5), {"aten::lerp_.Scalar": 1}),
        "addcmul_": (lambda a, t, i, h: a.addcmul_(t, h, value=2), {"aten::addcmul_": 1}),
        "int32.add_(float32) refused": (lambda a, t, i, h: _outcome(lambda: i.add_(a)), {"aten::add_.Tensor": 1}),
    }


@pytest.mark.parametrize("case", list(_counted_calls()))
def test_each_call_counts_only_its_own_op(neuron, case):
    call, counts = _counted_calls()[case]
    a = _gen((4, 5), 0).to("neuron")
    t = _gen((5, 4), 1).to("neuron").t()
    i = _gen((4, 5), 2, torch.int32).to("neuron")
    h = _gen((4, 5), 3, torch.float16).to("neuron")
    neuron.clear_op_tracking()
    call(a, t, i, h)
    assert neuron.get_executed_ops() == counts
    assert neuron.get_fallback_ops() == {}
