"""Judge one OpInfo sample on a device against the CPU, from identical inputs.

The conformance tier (tests/conformance) runs PyTorch's OpInfo samples on the device
and on the CPU. A sample is transferred with the same bytes, strides, storage sharing
and conj/neg bits, both runs start from the same seed, and the runs are compared:
results bitwise (or, where a CPU kernel is not bitwise-reproducible across buffers,
within `torch.testing.assert_close`'s default tolerance for the dtype), the inputs
after the call (a functional op must not write them; an in-place op must write the
same bytes), output devices, and aliasing (which outputs share storage with which
inputs and with each other). Bitwise first is what the device promises: its kernels
are the CPU's. The tier's run selection (mode, sample and dtype knobs) and the rule that
leaves out what the OpInfo itself declares broken live here too, shared by test_ops.py
and test_modules.py.
"""

from __future__ import annotations

import math
import os
import unittest
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

# Outcomes of one sample.
BITWISE = "bitwise"
CLOSE = "close"  # within assert_close's tolerance, not bitwise
UNDEFINED = "undefined"  # the CPU's own values differ run to run (e.g. `empty`); metadata agree
FAIL = "fail"
CPU_ERROR = "cpu_error"  # the CPU rejects the sample: nothing to compare
PASSING = (BITWISE, CLOSE, UNDEFINED)

# Which ops and modules the tier instantiates: the fixed CI subset, or everything
# the torch wheel's OpInfo and ModuleInfo databases hold (bench/conformance.py), and
# two knobs that narrow a run (bench/conformance.py --samples, --dtypes).
MODE_ENV = "TORCHFERRY_CONFORMANCE"
MODES = {"ci": "the fixed CI subset (default)", "full": "every OpInfo and ModuleInfo (bench/conformance.py)"}
SAMPLES_ENV = "TORCHFERRY_CONFORMANCE_SAMPLES"
DTYPES_ENV = "TORCHFERRY_CONFORMANCE_DTYPES"


def sample_limit(default: int | None) -> int | None:
    """At most this many samples per op and dtype (TORCHFERRY_CONFORMANCE_SAMPLES; 0 = all)."""
    value = os.environ.get(SAMPLES_ENV)
    if value is None:
        return default
    if not value.isdigit():
        raise ValueError(f"{SAMPLES_ENV}={value!r}: expected a count of samples, 0 for all")
    return int(value) or None


def dtypes(default: tuple[torch.dtype, ...]) -> tuple[torch.dtype, ...]:
    """The dtypes to try (TORCHFERRY_CONFORMANCE_DTYPES, comma-separated torch names)."""
    value = os.environ.get(DTYPES_ENV)
    if not value:
        return default
    names = [n.strip() for n in value.split(",")]
    bad = [n for n in names if not isinstance(getattr(torch, n, None), torch.dtype)]
    if bad:
        raise ValueError(f"{DTYPES_ENV}={value!r}: {', '.join(bad)} not torch dtypes; e.g. float32,int64")
    return tuple(getattr(torch, n) for n in names)


def mode() -> str:
    """The selected mode, from TORCHFERRY_CONFORMANCE."""
    value = os.environ.get(MODE_ENV, "ci")
    if value not in MODES:
        valid = "; ".join(f"{k}: {v}" for k, v in MODES.items())
        raise ValueError(f"{MODE_ENV}={value!r} is not a conformance mode; valid values: {valid}")
    return value


def declared_broken(info: Any, cls_name: str, test: str) -> bool:
    """The OpInfo or ModuleInfo itself marks PyTorch's `<cls_name>.<test>` as an expected
    failure or a skip on every device and dtype: its test data does not fit that check
    (as_strided's samples have no noncontiguous form, ...), so the tier's counterpart
    leaves it out on both devices alike."""
    return any(getattr(d, "cls_name", None) == cls_name and d.test_name == test and d.device_type is None
               and d.dtypes is None and any(_excludes(fn) for fn in d.decorators)
               for d in info.decorators)


def _excludes(decorator: Callable) -> bool:
    return decorator is unittest.expectedFailure or getattr(decorator, "__qualname__", "").startswith("skip.")


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
    key = (key, torch.device(device).type) if key is not None else None
    raw = memo.get(key) if key is not None else None
    if raw is None:
        source = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))
        raw = torch.empty(storage.nbytes(), dtype=torch.uint8, device=device)
        raw.copy_(source)
        if key is not None:
            memo[key] = raw
    out = torch.empty(0, dtype=t.dtype, device=device)
    out.set_(raw.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return out.requires_grad_(t.requires_grad)


def _device_type(x: Any) -> str | None:
    """The device type a device argument (torch.device or a string like "neuron:0") names."""
    if isinstance(x, torch.device):
        return x.type
    if isinstance(x, str) and x.split(":")[0] in ("cpu", torch._C._get_privateuse1_backend_name()):
        return x.split(":")[0]
    return None


def _is_cpu_device(x: Any) -> bool:
    return _device_type(x) == "cpu"


def transfer(tree: Any, device: str | torch.device | None) -> Any:
    """A fresh copy of the sample's arguments on `device`, device arguments renamed to
    it; with `device` None, each tensor stays on its own device (a tensor the sample put
    on the CPU on purpose, such as tensor_split's indices, stays there)."""
    target = torch.device(device) if device is not None else None
    memo: dict[Any, torch.Tensor] = {}

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return _clone_tensor(x, target or x.device, memo)
        kind = _device_type(x)
        if target is not None and kind is not None and kind != target.type:
            return target if isinstance(x, torch.device) else target.type
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
                    device: str) -> tuple[str, str]:
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


def compare(expected: tuple[Any, Any], actual: tuple[Any, Any], device: str) -> tuple[str, str]:
    """Compare (outputs, inputs after the call) of the CPU run with the run on `device`
    (a device type). A call given no tensor and no device creates on the CPU."""
    leaves = tree_flatten(expected[1])[0]
    if not any(isinstance(x, torch.Tensor) or _is_cpu_device(x) for x in leaves):
        device = "cpu"
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
    for j, (e, a) in enumerate(zip(exp_inputs, act_inputs)):  # an input stays on its device
        s, reason = _compare_tensor(e, a, f"input {j} after the call", a.device.type)
        if s == FAIL:
            return s, reason
        status = CLOSE if s == CLOSE else status
    exp_alias = _aliasing(_tensors(expected[0]), exp_inputs)
    act_alias = _aliasing(_tensors(actual[0]), act_inputs)
    if exp_alias != act_alias:
        return FAIL, (f"aliasing differs: {device} {sorted(act_alias)}, CPU {sorted(exp_alias)} "
                      "((kind, output, input-or-output) pairs that share storage)")
    return status, ""


# ---------------------------------------------------------------- running samples
def seeded_call(fn: Callable, sample_args: tuple[Any, tuple, dict], seed: int = 0) -> tuple[Any, Any]:
    """(result, the arguments after the call) of `fn(input, *args, **kwargs)`, from `seed`."""
    torch.manual_seed(seed)  # seeds every device's default generator, the accelerator's included
    inp, args, kwargs = sample_args
    return fn(inp, *args, **kwargs), sample_args


def error_line(error: BaseException) -> str:
    """`Type: first line` of an exception, for a one-line failure reason."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def describe(sample: Any) -> str:
    """A short, stable description of a sample's arguments (shapes, `nc` = noncontiguous)."""
    def short(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            strided = x.layout == torch.strided
            return f"T{tuple(x.shape)}{'' if not strided or x.is_contiguous() else 'nc'}"
        return x

    text = repr(tree_map(short, (sample.input, sample.args, sample.kwargs)))
    return text if len(text) <= 200 else text[:197] + "..."


def run_sample(fn: Callable, sample: Any, device: str, seed: int = 0) -> tuple[str, str]:
    """Run one sample, generated on `device`, through `fn` as generated and with every
    argument on the CPU, and judge the device run against the CPU's: (status, reason)."""
    device_type = torch.device(device).type
    pristine = transfer((sample.input, sample.args, sample.kwargs), None)
    try:
        expected = seeded_call(fn, transfer(pristine, "cpu"), seed)
    except Exception as error:  # noqa: BLE001 - a sample the CPU rejects is outside the comparison
        return CPU_ERROR, error_line(error)
    try:
        actual = seeded_call(fn, transfer(pristine, None), seed)
    except Exception as error:  # noqa: BLE001 - any device error is a failure to report
        return FAIL, f"{device_type} raised " + error_line(error)
    status, reason = compare(expected, actual, device_type)
    if status == FAIL and "values differ" in reason:
        # A kernel whose values are undefined (empty, new_empty, ...) differs from itself.
        again = seeded_call(fn, transfer(pristine, "cpu"), seed)
        if compare(expected, again, "cpu")[0] == FAIL:
            return UNDEFINED, "the CPU's values differ between two runs: " + reason
    return status, reason
