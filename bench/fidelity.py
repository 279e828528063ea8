"""Fidelity of the device's target rules on what the torch wheel ships: OpInfo samples.

Each rule of the device profile (profiles/trn2.toml [rules], docs/device/fidelity.md)
makes the device refuse a pattern TorchNeuron refuses. For each rule this runs the OpInfo
samples (torch.testing._internal's op_db) in the rule's pattern, on the CPU and on the
device with the rule on and off, and counts:

- changed: samples the CPU runs and the device ran with the rule off, that the rule now
  refuses with TorchNeuron's error (what the rehearsal newly predicts);
- twins: the same ops' samples without the pattern (float32, plain `.contiguous()`): how
  many the CPU runs, and how many of those the rule changes. That must be 0: a rule never
  touches code that does not use its pattern.

Patterns: `memory_format` calls `input.contiguous(memory_format=torch.channels_last)`
(4-D inputs; channels_last_3d for 5-D) before the op; `complex_dtypes` runs the complex64
samples; `unsigned_dtypes` the uint16/uint32/uint64 samples of ops whose OpInfo lists them;
`empty_inputs` the float32 samples with an empty tensor among the input and positional
arguments (twins: the same op's samples with none), where "changed" means the device's
result now differs from the CPU's (the target's zeros), not an error.
`overlapping_writes` lets through writes the CPU refuses, so it has no CPU-passing sample to
change; its tests are in tests/device/test_target_rules.py. `as_strided_bounds_first` changes
only the message of an error the CPU raises too (a negative stride, strides of another length),
likewise. `fallback_out_resize` changes only host-fallback calls given a non-empty `out=` of
another size than the result, which the samples here (no `out=`) never make; its tests are there too.
`compiled_out_written_after` changes only calls with an `out=` (a resize warning dropped, an `out=`
that shares memory with an input let through), which the samples here never make; likewise.

    python bench/fidelity.py                      # every OpInfo, 2 samples per op and dtype
    python bench/fidelity.py -k "add,mul,conv" --samples 4 --json fidelity.json

Exit status 0 when no rule changes a twin, 1 otherwise, 2 for bad arguments. A rule no
OpInfo sample exercises (the wheel's OpInfos rarely list uint16/32/64) says so; its
tests are tests/device/test_target_rules.py. A sample is run by the conformance tier's harness (tests/conformance):
the same bytes on both devices, results compared bitwise or within assert_close.
"""

from __future__ import annotations

import argparse
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

JSON_VERSION = 1
# rule -> what the device's failure says when the rule changes a sample (None: any failure,
# for a rule that changes results rather than refusing).
REFUSALS = {
    "memory_format": "Neuron tensors only support contiguous or preserve memory format",
    "complex_dtypes": "Unsupported PyTorch dtype",
    "unsigned_dtypes": "Unsupported PyTorch dtype",
    "empty_inputs": None,
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


def set_rules(**rules: bool) -> None:
    from torchferry.device import _runtime, target

    profile = _runtime.profile()
    target.configure(_runtime.core(), dataclasses.replace(profile, rules={**profile.rules, **rules}), "silent")


def samples(op: Any, dtype: torch.dtype, limit: int, keep: Callable[[Any], bool] | None = None) -> Iterator[Any]:
    """The op's first `limit` CPU samples for `dtype` (of those `keep` accepts), moved to the device
    (generating them on the device would itself run the device's ops in that dtype)."""
    try:
        generated = (s for s in op.sample_inputs("cpu", dtype, requires_grad=False) if keep is None or keep(s))
        for i, sample in enumerate(generated):
            if i >= limit:
                return
            moved = harness.transfer((sample.input, sample.args, sample.kwargs), "neuron")
            yield SimpleNamespace(input=moved[0], args=moved[1], kwargs=moved[2])
    except Exception:  # noqa: BLE001 - an OpInfo that cannot make samples here has none to judge
        return


def judge(fn: Callable, sample: Any, rule: str) -> tuple[str, str, str]:
    """(CPU-and-rule-off status, rule-on status, rule-on reason) of one sample."""
    set_rules(**{rule: False})
    off, _ = harness.run_sample(fn, sample, "neuron")
    set_rules(**{rule: True})
    on, reason = harness.run_sample(fn, sample, "neuron")
    return off, on, reason


def in_format(fn: Callable, fmt: str | None) -> Callable:
    def call(inp: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(inp, torch.Tensor) and inp.dim() in (4, 5):
            inp = inp.contiguous(memory_format=(torch.channels_last if inp.dim() == 4 else torch.channels_last_3d)) \
                if fmt else inp.contiguous()
        return fn(inp, *args, **kwargs)

    return call


def cases(rule: str, op: Any) -> tuple[list[tuple[Callable, torch.dtype]], list[tuple[Callable, torch.dtype]]]:
    """(samples in the rule's pattern, their twins without it) as (function, dtype) pairs."""
    cpu_dtypes = op.supported_dtypes("cpu")
    if rule == "memory_format":
        return [(in_format(op, "channels_last"), torch.float32)], [(in_format(op, None), torch.float32)]
    if rule == "empty_inputs":
        return ([(op, torch.float32)], [(op, torch.float32)]) if torch.float32 in cpu_dtypes else ([], [])
    wanted = [torch.complex64] if rule == "complex_dtypes" else [torch.uint16, torch.uint32, torch.uint64]
    pattern = [(op, d) for d in wanted if d in cpu_dtypes]
    return pattern, ([(op, torch.float32)] if pattern and torch.float32 in cpu_dtypes else [])


def has_empty_input(sample: Any) -> bool:
    """Whether the input or a positional argument is a tensor with no elements."""
    return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in (sample.input, *sample.args))


def in_pattern(rule: str, sample: Any) -> bool:
    """Whether a sample of the rule's pattern dtype carries the pattern (the twins are the others)."""
    if rule == "memory_format":
        return isinstance(sample.input, torch.Tensor) and sample.input.dim() in (4, 5)
    if rule == "empty_inputs":
        return has_empty_input(sample)
    return True


def measure(rule: str, ops: list[Any], limit: int) -> Tally:
    tally = Tally()
    refusal = REFUSALS[rule]
    for op in ops:
        pattern, twins = cases(rule, op)
        if not pattern:
            continue
        tried = False
        for fn, dtype in pattern:
            for sample in samples(op, dtype, limit, has_empty_input if rule == "empty_inputs" else None):
                if not in_pattern(rule, sample):
                    continue
                tried = True
                tally.samples += 1
                off, on, reason = judge(fn, sample, rule)
                if off in harness.PASSING:
                    tally.cpu_passing += 1
                    if on == harness.FAIL and (refusal is None or refusal in reason):
                        tally.changed += 1
                        tally.changed_ops.add(op.name)
        if not tried:
            continue
        tally.ops += 1
        for fn, dtype in twins:
            for sample in samples(op, dtype, limit, (lambda s: not has_empty_input(s)) if rule == "empty_inputs" else None):
                off, on, reason = judge(fn, sample, rule)
                if off in harness.PASSING:
                    tally.twin_cpu_passing += 1
                    if on not in harness.PASSING:
                        tally.twin_changed += 1
                        tally.twin_failures.append(f"{op.name}: {reason}")
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", help="comma-separated OpInfo names to keep (default: all)")
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

    torchferry.device.enable()
    warnings.simplefilter("ignore")
    keep = {k.strip() for k in args.k.split(",")} if args.k else None
    ops = [op for op in op_db if keep is None or op.name in keep]
    print(f"torch {torch.__version__}, {len(ops)} OpInfos, {args.samples} samples per op and dtype")
    results, ok = {}, True
    for rule in rules:
        start = time.perf_counter()
        t = measure(rule, ops, args.samples)
        passed = t.twin_changed == 0
        ok &= passed
        note = "" if t.samples else " (no OpInfo sample in the pattern)"
        print(f"{rule:16s} {'PASS' if passed else 'FAIL'}{note}: {t.ops} ops, {t.samples} samples in the pattern, "
              f"{t.cpu_passing} run on the CPU and with the rule off, {t.changed} "
              f"{'now refused' if REFUSALS[rule] else 'now differ from the CPU'} "
              f"({len(t.changed_ops)} ops); twins: {t.twin_cpu_passing} CPU-passing, {t.twin_changed} changed "
              f"[{time.perf_counter() - start:.0f} s]")
        for line in t.twin_failures[:10]:
            print(f"    twin changed: {line}")
        results[rule] = {**{k: v for k, v in dataclasses.asdict(t).items() if k not in ("changed_ops",)},
                         "changed_ops": sorted(t.changed_ops), "pass": passed}
    set_rules(**dict.fromkeys(rules, True))
    if args.json:
        from torchferry.report.core import write_atomic

        write_atomic(args.json, json.dumps({"version": JSON_VERSION, "torch": torch.__version__,
                                            "samples_per_op": args.samples, "rules": results}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
