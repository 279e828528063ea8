"""Fidelity of the device's target rules on what the torch wheel ships: OpInfo and ModuleInfo samples.

Each rule of the device profile (profiles/trn2.toml [rules], docs/device/fidelity.md)
makes the device refuse a pattern TorchNeuron refuses. For each rule this runs the OpInfo
samples (torch.testing._internal's op_db) and the ModuleInfo inputs (module_db: the module
built on the CPU from seed 0, in eval mode, and moved to the device as `model.to("neuron")`
does) in the rule's pattern, on the CPU and on the device with the rule on and off, and
counts, per database:

- changed: samples the CPU runs and the device ran with the rule off, that the rule now
  refuses with TorchNeuron's error (what the rehearsal newly predicts);
- twins: the same ops' samples without the pattern (float32, plain `.contiguous()`): how
  many the CPU runs, and how many of those the rule changes. That must be 0: a rule never
  touches code that does not use its pattern. A float32 sample whose op makes complex
  tensors itself (`torch.fft.fft2` of a real tensor) carries the `complex_dtypes` pattern, so
  it is counted apart (how many, how many the rule refuses), not as a twin.

OpInfos whose results PyTorch marks "not comparable" (`empty`, `new_empty`, ...: uninitialised
memory) are left out and named: a comparison with the CPU cannot judge them.

Patterns: `memory_format` calls `input.contiguous(memory_format=torch.channels_last)`
(4-D inputs; channels_last_3d for 5-D) before the op; `complex_dtypes` runs the complex64
samples; `unsigned_dtypes` the uint16/uint32/uint64 samples of ops whose OpInfo lists them;
`empty_inputs` the float32 samples with an empty tensor among the input and positional
arguments (twins: the same op's samples with none), where "changed" means the device's
result now differs from the CPU's (the target's zeros), not an error;
`compiled_results_row_major` lays the float32 input out column-major (`x.mT.contiguous().mT`,
the same values; twins: the input made row-major), and "changed" means the result now differs
from the CPU's (its strides: the target's are row-major, the CPU's follow the input's).
`overlapping_writes` lets through writes the CPU refuses, so it has no CPU-passing sample to
change; its tests are in tests/device/test_target_rules.py. `as_strided_bounds_first` changes
only the message of an error the CPU raises too (a negative stride, strides of another length),
likewise. `fallback_out_resize` changes only host-fallback calls given a non-empty `out=` of
another size than the result, which the samples here (no `out=`) never make; its tests are there too.
`compiled_out_written_after` changes only calls with an `out=` (a resize warning dropped, an `out=`
that shares memory with an input let through), which the samples here never make; likewise.
`compiled_results_row_major` changes only the strides of a torch-mlir op's result for a permuted input
(the values stay the CPU's); its tests are there too. `host_index_writes` changes only indexed writes
given an index tensor on the host, `int_arguments_as_int32` only calls with a Python int beyond
int32, and `casts_to_int_round` only casts between device tensors from a float to int8/uint8/int16/int32 of
values that are not whole, `cat_of_empty_tensors_1d` only a cat whose tensors are all empty, and `fallback_unmarked_writes_lost` only
BatchNorm's running statistics in training mode (the modules here run in eval mode), and `allocations_by_numel` only
the strides of empty tensors made on the device and the storage size of a strided allocation, which the samples here
(inputs on the device, small numbers, no casts of their own) never make or compare (the conformance tier below
compares strides: unchanged with the rule on); their tests are there too,
and the conformance tier (tests/conformance) runs every OpInfo sample with both on.

    python bench/fidelity.py                      # every OpInfo and ModuleInfo, 2 samples each per dtype
    python bench/fidelity.py -k "add,mul,nn.Conv2d" --samples 4 --json fidelity.json

Exit status 0 when no rule changes a twin, 1 otherwise, 2 for bad arguments. A rule no
OpInfo sample exercises (the wheel's OpInfos rarely list uint16/32/64) says so; its
tests are tests/device/test_target_rules.py. A sample is run by the conformance tier's harness (tests/conformance):
the same bytes on both devices, results compared bitwise or within assert_close.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

import torch  # noqa: E402

import conformance_harness as harness  # noqa: E402

JSON_VERSION = 2  # 2: figures per rule and database (OpInfo, ModuleInfo)
# rule -> what the device's failure says when the rule changes a sample (None: any failure,
# for a rule that changes results rather than refusing).
REFUSALS = {
    "memory_format": "Neuron tensors only support contiguous or preserve memory format",
    "complex_dtypes": "Unsupported PyTorch dtype",
    "unsigned_dtypes": "Unsupported PyTorch dtype",
    "empty_inputs": None,
    "compiled_results_row_major": None,
}


@dataclasses.dataclass
class Tally:
    ops: int = 0
    samples: int = 0
    cpu_passing: int = 0
    changed: int = 0
    twin_cpu_passing: int = 0
    twin_changed: int = 0
    changed_ops: set[str] = dataclasses.field(default_factory=set)
    twin_failures: list[str] = dataclasses.field(default_factory=list)
    # complex_dtypes: real-input samples whose op makes complex tensors itself (torch.fft.fft2
    # of a float32 tensor), so they carry the pattern and are no twins: how many, how many refused.
    made_complex: int = 0
    made_complex_refused: int = 0
    # OpInfos PyTorch marks "not comparable" (empty, new_empty, ...): their values are
    # uninitialised memory, which a comparison with the CPU cannot judge, so they are left out.
    not_comparable: set[str] = dataclasses.field(default_factory=set)


def set_rules(**rules: bool) -> None:
    from torchferry.device import _runtime, target

    profile = _runtime.profile()
    target.configure(_runtime.core(), dataclasses.replace(profile, rules={**profile.rules, **rules}), "silent")


class ModuleCall:
    """A ModuleInfo's module as an op: called with the sample's arguments, it runs a copy of
    the module on the device those arguments are on (built once on the CPU, from seed 0, in
    eval mode: the same weights on both sides, as `model.to("neuron")` gives)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module.eval()
        self.copies: dict[torch.device, torch.nn.Module] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        device = leaves[0].device if leaves else torch.device("cpu")
        if device not in self.copies:
            self.copies[device] = copy.deepcopy(self.module).to(device)
        return self.copies[device](*args, **kwargs)


def cpu_samples(subject: Any, dtype: torch.dtype) -> Iterator[tuple[Callable, Any]]:
    """(what to call, its CPU sample) for each of an OpInfo's or ModuleInfo's samples in `dtype`.
    A module input whose forward takes no positional argument is left out (the patterns act
    on the first one)."""
    if not hasattr(subject, "module_inputs_func"):
        for sample in subject.sample_inputs("cpu", dtype, requires_grad=False):
            yield subject, sample
        return
    for module_input in subject.module_inputs_func(subject, device="cpu", dtype=dtype, requires_grad=False,
                                                   training=False):
        forward = module_input.forward_input
        if forward is None or not forward.args:
            continue
        torch.manual_seed(0)
        constructor = module_input.constructor_input
        module = subject.module_cls(*constructor.args, **constructor.kwargs).to(dtype)
        yield ModuleCall(module), SimpleNamespace(input=forward.args[0], args=forward.args[1:], kwargs=forward.kwargs)


def samples(subject: Any, dtype: torch.dtype, limit: int,
            keep: Callable[[Any], bool] | None = None) -> Iterator[tuple[Callable, Any]]:
    """(what to call, sample) for the first `limit` CPU samples in `dtype` (of those `keep`
    accepts), moved to the device (generating them on the device would itself run the device's
    ops in that dtype)."""
    try:
        generated = ((fn, s) for fn, s in cpu_samples(subject, dtype) if keep is None or keep(s))
        for i, (fn, sample) in enumerate(generated):
            if i >= limit:
                return
            moved = harness.transfer((sample.input, sample.args, sample.kwargs), "neuron")
            yield fn, SimpleNamespace(input=moved[0], args=moved[1], kwargs=moved[2])
    except Exception:  # noqa: BLE001 - an OpInfo or ModuleInfo that cannot make samples here has none to judge
        return


def judge(fn: Callable, sample: Any, rule: str) -> tuple[str, str, str]:
    """(CPU-and-rule-off status, rule-on status, rule-on reason) of one sample."""
    set_rules(**{rule: False})
    off, _ = harness.run_sample(fn, sample, "neuron")
    set_rules(**{rule: True})
    on, reason = harness.run_sample(fn, sample, "neuron")
    return off, on, reason


def column_major(t: torch.Tensor) -> bool:
    """Whether the tensor can be laid out column-major differently from row-major."""
    return t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1


def arranged(fn: Callable, layout: str | None) -> Callable:
    """`fn` whose first argument is first laid out anew on its device: "channels_last" (4-D;
    channels_last_3d for 5-D) or plain "contiguous" (4-D and 5-D, the memory_format twin);
    "column_major" (the last two dimensions' strides swapped, the same values) or "row_major"
    (any input made contiguous, its twin); None: as is."""
    if layout is None:
        return fn

    def call(inp: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(inp, torch.Tensor):
            if layout == "column_major" and column_major(inp):
                inp = inp.mT.contiguous().mT
            elif layout == "row_major":
                inp = inp.contiguous()
            elif layout in ("channels_last", "contiguous") and inp.dim() in (4, 5):
                inp = inp.contiguous() if layout == "contiguous" else \
                    inp.contiguous(memory_format=torch.channels_last if inp.dim() == 4 else torch.channels_last_3d)
        return fn(inp, *args, **kwargs)

    return call


def cpu_dtypes(subject: Any) -> set[torch.dtype]:
    return set(subject.dtypes) if hasattr(subject, "module_inputs_func") else set(subject.supported_dtypes("cpu"))


def cases(rule: str, subject: Any) -> tuple[list[tuple[str | None, torch.dtype]], list[tuple[str | None, torch.dtype]]]:
    """(samples in the rule's pattern, their twins without it) as (layout, dtype) pairs: how the
    first argument is laid out anew (`arranged`)."""
    dtypes = cpu_dtypes(subject)
    if rule == "memory_format":
        return ([("channels_last", torch.float32)], [("contiguous", torch.float32)]) if torch.float32 in dtypes \
            else ([], [])
    if rule == "compiled_results_row_major":
        return ([("column_major", torch.float32)], [("row_major", torch.float32)]) if torch.float32 in dtypes \
            else ([], [])
    if rule == "empty_inputs":
        return ([(None, torch.float32)], [(None, torch.float32)]) if torch.float32 in dtypes else ([], [])
    wanted = [torch.complex64] if rule == "complex_dtypes" else [torch.uint16, torch.uint32, torch.uint64]
    pattern = [(None, d) for d in wanted if d in dtypes]
    return pattern, ([(None, torch.float32)] if pattern and torch.float32 in dtypes else [])


def comparable(op: Any) -> bool:
    """Whether the op's results have defined values. PyTorch's OpInfos skip comparing the ones
    that return uninitialised memory with `unittest.skip("Expected: <op> is not comparable")`
    (`empty_strided`'s names `empty`); read that rather than keep a list of our own. A reason
    naming another op (a decomposition's `new_empty_strided`) says nothing about this op's values."""
    prefix, suffix = "Expected: ", " is not comparable"
    for info in op.decorators:
        for decorator in getattr(info, "decorators", None) or [info]:
            for cell in getattr(decorator, "__closure__", None) or ():
                reason = cell.cell_contents
                if isinstance(reason, str) and reason.startswith(prefix) and reason.endswith(suffix) \
                        and op.name.startswith(reason[len(prefix):-len(suffix)]):
                    return False
    return True


def makes_complex(fn: Callable, sample: Any) -> bool:
    """Whether the op, run on the CPU, returns a complex tensor (from real inputs here)."""
    try:
        result = harness.seeded_call(fn, harness.transfer((sample.input, sample.args, sample.kwargs), "cpu"), 0)
    except Exception:  # noqa: BLE001 - the twin's own run reports a sample the CPU rejects
        return False
    return any(isinstance(t, torch.Tensor) and t.is_complex() for t in torch.utils._pytree.tree_leaves(result))


def has_empty_input(sample: Any) -> bool:
    """Whether the input or a positional argument is a tensor with no elements."""
    return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in (sample.input, *sample.args))


def in_pattern(rule: str, sample: Any) -> bool:
    """Whether a sample of the rule's pattern dtype carries the pattern (the twins are the others)."""
    if rule == "memory_format":
        return isinstance(sample.input, torch.Tensor) and sample.input.dim() in (4, 5)
    if rule == "empty_inputs":
        return has_empty_input(sample)
    if rule == "compiled_results_row_major":
        return isinstance(sample.input, torch.Tensor) and column_major(sample.input)
    return True


def measure(rule: str, subjects: list[Any], limit: int) -> Tally:
    tally = Tally()
    refusal = REFUSALS[rule]
    for op in subjects:
        pattern, twins = cases(rule, op)
        if not pattern:
            continue
        if not comparable(op):
            tally.not_comparable.add(op.name)
            continue
        tried = False
        for fmt, dtype in pattern:
            for fn, sample in samples(op, dtype, limit, has_empty_input if rule == "empty_inputs" else None):
                if not in_pattern(rule, sample):
                    continue
                tried = True
                tally.samples += 1
                off, on, reason = judge(arranged(fn, fmt), sample, rule)
                if off in harness.PASSING:
                    tally.cpu_passing += 1
                    if on == harness.FAIL and (refusal is None or refusal in reason):
                        tally.changed += 1
                        tally.changed_ops.add(op.name)
        if not tried:
            continue
        tally.ops += 1
        for fmt, dtype in twins:
            for fn, sample in samples(op, dtype, limit, (lambda s: not has_empty_input(s)) if rule == "empty_inputs" else None):
                fn = arranged(fn, fmt)
                off, on, reason = judge(fn, sample, rule)
                if rule == "complex_dtypes" and makes_complex(fn, sample):
                    if off in harness.PASSING:
                        tally.made_complex += 1
                        tally.made_complex_refused += on == harness.FAIL and refusal in reason
                    continue
                if off in harness.PASSING:
                    tally.twin_cpu_passing += 1
                    if on not in harness.PASSING:
                        tally.twin_changed += 1
                        tally.twin_failures.append(f"{op.name}: {reason}")
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", help="comma-separated OpInfo or ModuleInfo names to keep (default: all)")
    parser.add_argument("--samples", type=int, default=2, help="samples per op and dtype (default 2)")
    parser.add_argument("--rules", default=",".join(REFUSALS), help=f"rules to measure (default {','.join(REFUSALS)})")
    parser.add_argument("--json", type=Path, help="write the figures here (versioned JSON, written atomically)")
    args = parser.parse_args(argv)
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    unknown = [r for r in rules if r not in REFUSALS]
    if unknown or args.samples < 1:
        parser.error(f"unknown rule(s) {unknown}: the rules are {', '.join(REFUSALS)}" if unknown
                     else f"--samples {args.samples}: expected at least 1")

    import torchferry.device
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

    torchferry.device.enable()
    warnings.simplefilter("ignore")
    keep = {k.strip() for k in args.k.split(",")} if args.k else None
    databases = {kind: [info for info in db if keep is None or info.name in keep]
                 for kind, db in (("OpInfo", op_db), ("ModuleInfo", module_db))}
    print(f"torch {torch.__version__}, {len(databases['OpInfo'])} OpInfos, {len(databases['ModuleInfo'])} "
          f"ModuleInfos, {args.samples} samples per op (module) and dtype")
    results, ok = {}, True
    for rule in rules:
        results[rule] = {}
        for kind, subjects in databases.items():
            start = time.perf_counter()
            t = measure(rule, subjects, args.samples)
            passed = t.twin_changed == 0
            ok &= passed
            note = "" if t.samples else f" (no {kind} sample in the pattern)"
            print(f"{rule:26s} {kind:10s} {'PASS' if passed else 'FAIL'}{note}: {t.ops} {kind}s, {t.samples} samples "
                  f"in the pattern, {t.cpu_passing} run on the CPU and with the rule off, {t.changed} "
                  f"{'now refused' if REFUSALS[rule] else 'now differ from the CPU'} "
                  f"({len(t.changed_ops)} {kind}s); twins: {t.twin_cpu_passing} CPU-passing, {t.twin_changed} changed "
                  f"[{time.perf_counter() - start:.0f} s]")
            if t.made_complex:
                print(f"    real-input samples whose op makes complex tensors (in the pattern, not twins): "
                      f"{t.made_complex} CPU-passing, {t.made_complex_refused} refused")
            if t.not_comparable:
                print(f"    left out, values undefined (PyTorch: not comparable): {', '.join(sorted(t.not_comparable))}")
            for line in t.twin_failures[:10]:
                print(f"    twin changed: {line}")
            results[rule][kind] = {**{k: v for k, v in dataclasses.asdict(t).items()
                                      if k not in ("changed_ops", "not_comparable")},
                                   "changed_names": sorted(t.changed_ops), "not_comparable": sorted(t.not_comparable),
                                   "pass": passed}
    set_rules(**dict.fromkeys(rules, True))
    if args.json:
        from torchferry.report.core import write_atomic

        write_atomic(args.json, json.dumps({"version": JSON_VERSION, "torch": torch.__version__,
                                            "samples_per_op": args.samples, "rules": results}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
