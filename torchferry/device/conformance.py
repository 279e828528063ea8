"""Conformance of the `neuron` device against PyTorch's own OpInfo test data.

Each OpInfo sample input runs on the CPU and on the device from identical inputs
(same bytes, strides and storage sharing, same seed), and the two runs are compared:
results bitwise (or, where a CPU kernel is not bitwise-reproducible across buffers,
within `torch.testing.assert_close`'s default tolerance for the dtype), the inputs
after the call (a functional op must not write them; an in-place op must write the
same bytes), output devices, and aliasing (which outputs share storage with which
inputs and with each other must be the same on both devices).

`bench/opinfo_conformance.py` runs the whole database with this module, and
`tests/device/test_opinfo_conformance.py` a fixed subset, so both judge a sample
the same way. The device must already be enabled (`torchferry.device.enable()`).
"""

from __future__ import annotations

import math
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = "neuron"

# Outcomes of one sample. PASSING count towards the pass rate; EXCLUDED samples do
# not run on the CPU and are not part of it.
BITWISE = "bitwise"
CLOSE = "close"  # within assert_close's tolerance, not bitwise
UNDEFINED = "undefined"  # the CPU's own values differ run to run (e.g. `empty`); metadata agree
FAIL = "fail"
CPU_ERROR = "cpu_error"
PASSING = (BITWISE, CLOSE, UNDEFINED)

# The dtypes a full run tries for each op (those of them the op supports on the CPU).
DEFAULT_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.bfloat16)


@dataclass
class SampleResult:
    """The verdict on one sample of one op variant at one dtype."""

    op: str  # OpInfo full name, e.g. "nn.functional.relu" or "div.floor_rounding"
    variant: str  # "op" or "inplace"
    dtype: str
    index: int  # position in op.sample_inputs(...)
    status: str
    reason: str = ""
    sample: str = ""  # short description of the sample's arguments

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- sample transfer
def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    storage = t.untyped_storage()
    return (storage.data_ptr(), storage.nbytes()) if storage.nbytes() else None


def _clone_tensor(t: torch.Tensor, device: torch.device, memo: dict[Any, torch.Tensor]) -> torch.Tensor:
    """`t` on `device` with the same bytes, sizes, strides, offset and conj/neg bits;
    tensors that share a storage keep sharing one (memo maps storage -> byte copy)."""
    if t.layout != torch.strided or t.is_quantized:
        return t.to(device)
    if t.is_conj():
        return _clone_tensor(t.conj(), device, memo).conj()
    if t.is_neg():
        return torch._neg_view(_clone_tensor(torch._neg_view(t), device, memo))
    storage = t.untyped_storage()
    key = _storage_key(t)
    raw = memo.get(key) if key is not None else None
    if raw is None:
        source = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
        raw = torch.empty(storage.nbytes(), dtype=torch.uint8, device=device)
        raw.copy_(source)
        if key is not None:
            memo[key] = raw
    out = torch.empty(0, dtype=t.dtype, device=device)
    out.set_(raw.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return out.requires_grad_(t.requires_grad)


def _is_cpu_device(x: Any) -> bool:
    if isinstance(x, torch.device):
        return x.type == "cpu"
    return isinstance(x, str) and (x == "cpu" or x.startswith("cpu:"))


def transfer(tree: Any, device: str | torch.device) -> Any:
    """The sample's arguments on `device`; device arguments naming the CPU name `device`."""
    device = torch.device(device)
    memo: dict[Any, torch.Tensor] = {}

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return _clone_tensor(x, device, memo)
        if device.type != "cpu" and _is_cpu_device(x):
            return device if isinstance(x, torch.device) else device.type
        return x

    return tree_map(leaf, tree)


# ---------------------------------------------------------------- comparison
def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _aliasing(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> set[tuple[str, int, int]]:
    """Which output shares storage with which input, and outputs with each other."""
    def key(t: torch.Tensor) -> int | None:
        if t.layout != torch.strided or t.untyped_storage().nbytes() == 0:
            return None
        return t.untyped_storage().data_ptr()

    out_keys = [key(t) for t in outputs]
    in_keys = [key(t) for t in inputs]
    pairs = {("input", i, j) for i, a in enumerate(out_keys) for j, b in enumerate(in_keys) if a and a == b}
    pairs |= {("output", i, j) for i, a in enumerate(out_keys) for j, b in enumerate(out_keys[:i]) if a and a == b}
    return pairs


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` on the CPU, its conj/neg bits applied there (the harness's own transfer must
    not depend on the device materialising conj/neg views)."""
    t = t.detach()
    if t.is_conj():
        return _to_host(t.conj()).conj().resolve_conj()
    if t.is_neg():
        return _to_host(torch._neg_view(t)).neg()
    return t.cpu()


def _host_bytes(t: torch.Tensor) -> torch.Tensor:
    t = torch.empty(t.numel(), dtype=t.dtype).copy_(_to_host(t).reshape(-1))  # stride 1
    return t.view(torch.uint8) if t.numel() else t.to(torch.uint8)


def _compare_tensor(expected: torch.Tensor, actual: torch.Tensor, what: str,
                    device: str = DEVICE) -> tuple[str, str]:
    """(status, reason) for one tensor: BITWISE, CLOSE or FAIL. `device` is where a
    result the CPU run leaves on the CPU must be (the CPU for factories given no
    tensor or device: they create on the default device)."""
    if expected.layout != actual.layout:
        return FAIL, f"{what}: layout {actual.layout}, CPU gives {expected.layout}"
    if expected.dtype != actual.dtype:
        return FAIL, f"{what}: dtype {actual.dtype}, CPU gives {expected.dtype}"
    if expected.shape != actual.shape:
        return FAIL, f"{what}: shape {tuple(actual.shape)}, CPU gives {tuple(expected.shape)}"
    want_device = device if expected.device.type == "cpu" else expected.device.type
    if actual.device.type != want_device:
        return FAIL, f"{what}: on {actual.device}, expected on {want_device}"
    if expected.layout != torch.strided:
        expected, actual = expected.to_dense(), _to_host(actual).to_dense()
    elif expected.numel() > 1:
        strides = [(s, a) for s, a, n in zip(expected.stride(), actual.stride(), expected.shape) if n > 1]
        if any(s != a for s, a in strides):
            return FAIL, f"{what}: strides {actual.stride()}, CPU gives {expected.stride()}"
    if torch.equal(_host_bytes(expected), _host_bytes(actual)):
        return BITWISE, ""
    try:
        torch.testing.assert_close(_to_host(actual), _to_host(expected), equal_nan=True,
                                   check_stride=False)
    except AssertionError as error:
        first = str(error).strip().splitlines()
        return FAIL, f"{what}: values differ ({' '.join(first[:3])})"
    return CLOSE, ""


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(expected: tuple[Any, Any], actual: tuple[Any, Any]) -> tuple[str, str]:
    """Compare (outputs, inputs after the call) of the CPU run with the device run."""
    leaves = tree_flatten(expected[1])[0]
    device = DEVICE if any(isinstance(x, torch.Tensor) or _is_cpu_device(x) for x in leaves) else "cpu"
    exp_leaves, exp_spec = tree_flatten(expected[0])
    act_leaves, act_spec = tree_flatten(actual[0])
    if len(exp_leaves) != len(act_leaves):
        return FAIL, f"{len(act_leaves)} outputs, CPU gives {len(exp_leaves)}"
    status = BITWISE
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return FAIL, f"output {i}: {type(a).__name__}, CPU gives {type(e).__name__}"
        if isinstance(e, torch.Tensor):
            s, reason = _compare_tensor(e, a, f"output {i}", device)
            if s == FAIL:
                return s, reason
            status = CLOSE if s == CLOSE else status
        elif not _values_equal(e, a):
            return FAIL, f"output {i}: {a!r}, CPU gives {e!r}"
    exp_inputs, act_inputs = _tensors(expected[1]), _tensors(actual[1])
    for j, (e, a) in enumerate(zip(exp_inputs, act_inputs)):
        s, reason = _compare_tensor(e, a, f"input {j} after the call")
        if s == FAIL:
            return s, reason
        status = CLOSE if s == CLOSE else status
    exp_alias = _aliasing(_tensors(expected[0]), exp_inputs)
    act_alias = _aliasing(_tensors(actual[0]), act_inputs)
    if exp_alias != act_alias:
        return FAIL, (f"aliasing differs: neuron {sorted(act_alias)}, CPU {sorted(exp_alias)} "
                      "((kind, output, input-or-output) pairs that share storage)")
    return status, ""


# ---------------------------------------------------------------- running samples
def _call(fn: Callable, sample_args: tuple[Any, tuple, dict], seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)  # seeds every device's default generator, the neuron one included
    inp, args, kwargs = sample_args
    return fn(inp, *args, **kwargs), sample_args


def _error_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def describe(sample: Any) -> str:
    def short(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            strided = x.layout == torch.strided
            return f"T{tuple(x.shape)}{'' if not strided or x.is_contiguous() else 'nc'}"
        return x

    text = repr(tree_map(short, (sample.input, sample.args, sample.kwargs)))
    return text if len(text) <= 200 else text[:197] + "..."


def run_sample(fn: Callable, sample: Any, seed: int = 0) -> tuple[str, str]:
    """Run one sample through `fn` on the CPU and on the device and judge it."""
    pristine = transfer((sample.input, sample.args, sample.kwargs), "cpu")
    try:
        expected = _call(fn, transfer(pristine, "cpu"), seed)
    except Exception as error:  # noqa: BLE001 - a sample the CPU rejects is outside the pass rate
        return CPU_ERROR, _error_line(error)
    try:
        actual = _call(fn, transfer(pristine, DEVICE), seed)
    except Exception as error:  # noqa: BLE001 - any device error is a failure to report
        return FAIL, "neuron raised " + _error_line(error)
    status, reason = compare(expected, actual)
    if status == FAIL:
        # A kernel whose values are undefined (empty, new_empty, ...) differs from itself.
        try:
            again = _call(fn, transfer(pristine, "cpu"), seed)
        except Exception:  # noqa: BLE001
            return status, reason
        if compare(expected, again)[0] == FAIL and "values differ" in reason:
            return UNDEFINED, "the CPU's values differ between two runs: " + reason
    return status, reason


def op_variants(op: Any) -> Iterator[tuple[str, Callable]]:
    yield "op", op.op
    if op.inplace_variant is not None:
        yield "inplace", op.inplace_variant


def sample_key(op: str, variant: str, dtype: str, index: int) -> str:
    return f"{op}|{variant}|{dtype}|{index}"


def run_op(op: Any, dtypes: tuple[torch.dtype, ...] = DEFAULT_DTYPES, limit: int | None = None,
           seed: int = 0, skip: dict[str, str] | None = None,
           before: Callable[[str], None] | None = None) -> list[SampleResult]:
    """Every sample (up to `limit` per dtype) of every variant of one OpInfo.

    `before(key)` is called before each sample runs (a crash-resilient runner records
    it); samples whose key is in `skip` are not run and fail with the given reason.
    """
    results: list[SampleResult] = []
    supported = op.supported_dtypes("cpu")
    for dtype in dtypes:
        if dtype not in supported:
            continue
        dtype_name = str(dtype).removeprefix("torch.")
        try:
            torch.manual_seed(seed)
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
        except Exception as error:  # noqa: BLE001 - OpInfo's own generator failed on this torch
            results.append(SampleResult(op.full_name, "op", dtype_name, -1, CPU_ERROR,
                                        "sample generation: " + _error_line(error)))
            continue
        if limit is not None:
            samples = samples[:limit]
        for index, sample in enumerate(samples):
            for variant, fn in op_variants(op):
                key = sample_key(op.full_name, variant, dtype_name, index)
                if skip and key in skip:
                    results.append(SampleResult(op.full_name, variant, dtype_name, index, FAIL,
                                                skip[key], describe(sample)))
                    continue
                if before is not None:
                    before(key)
                try:
                    status, reason = run_sample(fn, sample, seed)
                except Exception as error:  # noqa: BLE001 - a harness error is reported, not hidden
                    status, reason = FAIL, "comparison raised " + _error_line(error) + " " + \
                        traceback.format_exc(limit=-1).strip().splitlines()[-1]
                results.append(SampleResult(op.full_name, variant, dtype_name, index, status, reason,
                                            describe(sample) if status == FAIL else ""))
    return results


def summarize(results: list[SampleResult]) -> dict[str, Any]:
    """Counts and the pass rate over the samples that run on the CPU."""
    counted = [r for r in results if r.status != CPU_ERROR]
    passed = [r for r in counted if r.status in PASSING]
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    return {
        "samples_run_on_cpu": len(counted),
        "passed": len(passed),
        "pass_rate": len(passed) / len(counted) if counted else 1.0,
        "by_status": by_status,
    }
