"""PyTorch's OpInfo samples on the device and on the CPU: what TestCommon checks, our tests.

Device-generic tests over `torch.testing._internal.common_methods_invocations.op_db`,
instantiated by `instantiate_device_type_tests` for the CPU and for the PrivateUse1
backend (class suffixes CPU, and PRIVATEUSE1 or the backend's name: TorchNeuron's
upstream runner tries both), so every test runs on both devices on the same samples:

- `test_compare_cpu`: the op and its in-place variant give the CPU's results, inputs
  after the call, output devices and aliasing (conformance_harness.run_sample);
- `test_out`: `out=` returns the given tensors, filled with the op's result, also when
  they must be resized or are noncontiguous;
- `test_out_wrong_device`: an `out=` tensor on another device raises, as on every
  accelerator (a CPU-only run has no other device type; it skips there);
- `test_noncontiguous_samples`: noncontiguous inputs give the contiguous results and
  gradients;
- `test_variant_consistency`: function, method, operator and in-place variants agree,
  gradients included.

The CI subset is the first `CI_SAMPLES` samples of `CI_OPS` at `CI_DTYPES`;
TORCHFERRY_CONFORMANCE=full takes every sample of every OpInfo (bench/conformance.py).
An OpInfo that marks PyTorch's own TestCommon counterpart of a test as failing or
skipped on every device is left out of that test on both devices
(conformance_harness.declared_broken). Expected failures: expected_failures.json.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import torchferry.device

# The PrivateUse1 test base joins common_device_type's list when that module is first
# imported, so the device is registered before the imports below.
torchferry.device.enable()

import torch  # noqa: E402
from torch.testing._internal.common_device_type import (  # noqa: E402
    OpDTypes, instantiate_device_type_tests, ops, skipCPUIf,
)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

import conformance_harness as harness  # noqa: E402
import pytest

pytestmark = pytest.mark.slow  # OpInfo/ModuleInfo sweeps over the built-in device

# A fixed, representative subset for CI: elementwise, reductions and scans, views,
# indexing and building, linear algebra, nn.functional. Random-free, so a failure is
# never a generator difference.
CI_OPS = (
    "add", "mul", "div.floor_rounding", "pow", "rsqrt", "clamp", "where", "eq", "addcmul", "nan_to_num",
    "bitwise_and",
    "sum", "prod", "argmax", "var", "cumsum", "logsumexp", "sort",
    "transpose", "reshape", "expand", "narrow", "as_strided", "view_as_real",
    "cat", "gather", "scatter_add", "index_put", "index_add", "masked_fill", "masked_select", "nonzero", "tril",
    "matmul", "addmm", "linalg.solve", "linalg.qr",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm", "nn.functional.embedding",
    "nn.functional.cross_entropy", "nn.functional.conv2d", "nn.functional.scaled_dot_product_attention",
    "nn.functional.pad.constant",
)
# Dtypes each test tries (those of them each op supports): CI, then a full run.
CI_DTYPES = (torch.float32, torch.int64)
FULL_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.bfloat16)
CI_NONCONTIGUOUS_DTYPES = (torch.float32,)
FULL_NONCONTIGUOUS_DTYPES = (torch.float32, torch.int64)
# CI judges the first samples of each op only; a full run takes every sample.
CI_SAMPLES = 3

FULL = harness.mode() == "full"
_by_name = {op.full_name: op for op in op_db}
OPS = list(op_db) if FULL else [_by_name[name] for name in CI_OPS]  # KeyError: a CI name left op_db
# TORCHFERRY_CONFORMANCE_DTYPES / _SAMPLES narrow a run (bench/conformance.py --dtypes/--samples).
DTYPES = harness.dtypes(FULL_DTYPES if FULL else CI_DTYPES)
NONCONTIGUOUS_DTYPES = tuple(d for d in (FULL_NONCONTIGUOUS_DTYPES if FULL else CI_NONCONTIGUOUS_DTYPES)
                             if d in DTYPES)
SAMPLES = harness.sample_limit(None if FULL else CI_SAMPLES)


def _for(test: str, ops_: list[Any]) -> list[Any]:
    return [op for op in ops_ if not harness.declared_broken(op, "TestCommon", test)]


OUT_OPS = _for("test_out", [op for op in OPS if op.supports_out])
VARIANT_OPS = _for("test_variant_consistency_eager",
                   [op for op in OPS if op.method_variant or op.operator_variant or op.inplace_variant])
NO_SECOND_DEVICE = ("a CPU-only run has no second device type to put the out= tensor on "
                    "(PyTorch's test_out checks this case on accelerators only)")


def _samples(op: Any, device: str, dtype: torch.dtype, requires_grad: bool = False) -> list[Any]:
    samples = op.sample_inputs(device, dtype, requires_grad=requires_grad)
    return list(samples if SAMPLES is None else itertools.islice(samples, SAMPLES))  # generated lazily


def _call(fn: Callable, sample: Any, **extra: Any) -> Any:
    torch.manual_seed(0)
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


def _grads(output: Any, sample: Any) -> list[torch.Tensor | None]:
    """Gradients of the sum of the differentiable outputs w.r.t. the sample's leaf
    tensors (a fixed all-ones cotangent, so two runs are comparable). The sample's
    `output_process_fn_grad` first keeps the loss well defined (eigenvectors' phase, ...)."""
    output = sample.output_process_fn_grad(output)
    outs = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
              if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not leaves:
        return []
    return list(torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs], allow_unused=True))


def _backward_dtype(op: Any, device: str, dtype: torch.dtype) -> bool:
    return op.supports_autograd and dtype in op.supported_backward_dtypes(torch.device(device).type)


def _inplace_applies(sample: Any, expected: Any) -> bool:
    """In place writes the result into the input: only where it has its shape and dtype."""
    return (not sample.broadcasts_input and isinstance(sample.input, torch.Tensor)
            and isinstance(expected, torch.Tensor) and expected.shape == sample.input.shape
            and expected.dtype == sample.input.dtype)


class TestOpConformance(TestCase):
    @ops(_for("test_compare_cpu", OPS), allowed_dtypes=DTYPES)
    def test_compare_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
        failures, ran, rejected = [], 0, ""
        for index, sample in enumerate(_samples(op, device, dtype)):
            for variant, fn in (("op", op.op), ("inplace", op.inplace_variant)):
                if fn is None:
                    continue
                status, reason = harness.run_sample(fn, sample, device)
                if status == harness.CPU_ERROR:
                    rejected = rejected or reason
                    continue
                ran += 1
                if status == harness.FAIL:
                    failures.append(f"{variant} sample {index} {harness.describe(sample)}: {reason}")
        if not ran:
            self.skipTest(f"the CPU rejects every sample, nothing to compare: {rejected}")
        if failures:
            self.fail(f"{len(failures)} of {ran} sample runs differ from the CPU: " + "; ".join(failures[:5]))

    def _first_out_sample(self, op: Any, device: str, dtype: torch.dtype) -> tuple[Any, Any]:
        """The first sample whose result is a tensor or a flat tuple of tensors (what an
        out= argument can hold), and that result."""
        for sample in _samples(op, device, dtype):
            expected = _call(op, sample)
            parts = expected if isinstance(expected, tuple) else (expected,)
            if all(isinstance(t, torch.Tensor) for t in parts):
                return sample, expected
        self.skipTest(f"no sample of {op.full_name} returns a tensor or a flat tuple of tensors for out=")

    @ops(OUT_OPS, dtypes=OpDTypes.any_one)
    def test_out(self, device: str, dtype: torch.dtype, op: Any) -> None:
        sample, expected = self._first_out_sample(op, device, dtype)
        # out= tensors of the result's shape, with nothing in their elements yet,
        # then empty ones (the op resizes them), then noncontiguous ones.
        cases = {
            "same shape": lambda t: torch.empty_like(t),
            "empty, resized": lambda t: t.new_empty(0),
            "noncontiguous": lambda t: torch.empty(*t.shape, 2, dtype=t.dtype, device=t.device)[..., 0],
        }
        for case, make in cases.items():
            out = tree_map(make, expected)
            result = _call(op, sample, out=out)
            for given, returned in zip(tree_flatten(out)[0], tree_flatten(result)[0]):
                self.assertIs(returned, given, msg=f"{case}: out= must return the tensors it was given")
            self.assertEqual(result, expected, msg=f"{case}: out= result differs from the functional result")

    @skipCPUIf(True, NO_SECOND_DEVICE)
    @ops(OUT_OPS, dtypes=OpDTypes.any_one)
    def test_out_wrong_device(self, device: str, dtype: torch.dtype, op: Any) -> None:
        sample, expected = self._first_out_sample(op, device, dtype)
        on_cpu = tree_map(lambda t: torch.empty_like(t, device="cpu"), expected)
        with self.assertRaisesRegex(RuntimeError, "(?i)device", msg=f"input on {device}, out= on cpu"):
            _call(op, sample, out=on_cpu)

    @ops(_for("test_noncontiguous_samples", OPS), allowed_dtypes=NONCONTIGUOUS_DTYPES)
    def test_noncontiguous_samples(self, device: str, dtype: torch.dtype, op: Any) -> None:
        grad = _backward_dtype(op, device, dtype)
        for index, sample in enumerate(_samples(op, device, dtype, requires_grad=grad)):
            noncontiguous = sample.noncontiguous()
            expected, actual = _call(op, sample), _call(op, noncontiguous)
            self.assertEqual(actual, expected, msg=f"sample {index} {harness.describe(sample)}: forward")
            if grad:
                self.assertEqual(_grads(actual, noncontiguous), _grads(expected, sample),
                                 msg=f"sample {index} {harness.describe(sample)}: gradients")

    @ops(VARIANT_OPS, dtypes=OpDTypes.any_one)
    def test_variant_consistency(self, device: str, dtype: torch.dtype, op: Any) -> None:
        grad = _backward_dtype(op, device, dtype)
        others = {"method": op.method_variant, "operator": op.operator_variant}
        others = {k: v for k, v in others.items() if v is not None}
        for index, sample in enumerate(_samples(op, device, dtype, requires_grad=grad)):
            what = f"sample {index} {harness.describe(sample)}"
            expected = _call(op, sample)
            expected_grads = _grads(expected, sample) if grad else None
            for name, fn in others.items():
                actual = _call(fn, sample)
                self.assertEqual(actual, expected, msg=f"{what}: {name} variant")
                if grad:
                    self.assertEqual(_grads(actual, sample), expected_grads, msg=f"{what}: {name} gradients")
            if op.inplace_variant is not None and _inplace_applies(sample, expected):
                target = sample.input.detach().clone()
                inplace = sample.transform(lambda t: t.detach() if isinstance(t, torch.Tensor) else t)
                torch.manual_seed(0)
                result = op.inplace_variant(target, *inplace.args, **inplace.kwargs)
                self.assertIs(result, target, msg=f"{what}: the in-place variant must return self")
                self.assertEqual(target, expected.detach(), msg=f"{what}: in-place variant")


instantiate_device_type_tests(TestOpConformance, globals(), only_for=("cpu", "privateuse1"))
