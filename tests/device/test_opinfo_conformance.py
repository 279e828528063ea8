"""OpInfo conformance, CI subset: common ops give the CPU's results and aliasing on `neuron`.

A fixed list of common ops, a few OpInfo samples each (float32, int64 and complex64
where the op supports them on the CPU), judged by the same code as the full-database
bench (bench/opinfo_conformance.py; torchferry/device/conformance.py): outputs bitwise
or within assert_close's default tolerance, inputs after the call, output devices and
aliasing, for the op and its in-place variant.
"""

from __future__ import annotations

import pytest
import torch

import torchferry.device
from torchferry.device import conformance

OPS = (
    # elementwise and comparison
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "pow", "neg", "abs", "exp",
    "log", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "clamp", "where", "maximum", "eq", "lt",
    "logical_and", "lerp", "addcmul", "isnan", "nan_to_num",
    # reductions and scans
    "sum", "mean", "prod", "amax", "argmax", "var", "cumsum", "softmax", "log_softmax",
    "linalg.vector_norm", "topk", "sort",
    # neural-network functions
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.embedding", "nn.functional.dropout",
    "nn.functional.cross_entropy", "nn.functional.conv2d", "nn.functional.scaled_dot_product_attention",
    # linear algebra
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "outer",
    # views and shape ops (aliasing)
    "transpose", "permute", "view", "reshape", "expand", "squeeze", "unsqueeze", "narrow", "split",
    "chunk", "as_strided", "view_as_real", "conj", "T", "contiguous",
    # building, indexing and data-dependent shapes
    "cat", "stack", "index_select", "gather", "scatter", "scatter_add", "index_put", "index_add",
    "masked_fill", "masked_select", "nonzero", "tril", "flip", "roll", "repeat", "clone", "to",
    "fill", "zero_", "full_like", "histc", "bincount",
    # random (seeded on both devices)
    "bernoulli", "multinomial", "normal",
)
DTYPES = (torch.float32, torch.int64, torch.complex64)
SAMPLES_PER_DTYPE = 3


@pytest.fixture(scope="module")
def op_db() -> dict:
    torchferry.device.enable()
    from torch.testing._internal.common_methods_invocations import op_db

    return {op.full_name: op for op in op_db}


def test_subset_names_exist(op_db: dict) -> None:
    assert [name for name in OPS if name not in op_db] == []


@pytest.mark.parametrize("name", OPS)
def test_op_matches_cpu(op_db: dict, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchferry.device import _runtime

    _runtime.set_fallback_mode("silent")  # profile-listed host ops (nonzero, ...) still run
    try:
        results = conformance.run_op(op_db[name], DTYPES, SAMPLES_PER_DTYPE)
    finally:
        _runtime.set_fallback_mode("warn")
    ran = [r for r in results if r.status != conformance.CPU_ERROR]
    failures = [f"{r.variant}/{r.dtype}/sample {r.index}: {r.reason} [{r.sample}]"
                for r in ran if r.status not in conformance.PASSING]
    assert ran, f"no sample of {name} ran on the CPU: {[r.reason for r in results][:3]}"
    assert failures == []
