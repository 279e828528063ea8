"""Full time: cold start, import and load, first call, warm-up curve, interleaved steady state.

Every step is measured by the worker between two explicit device synchronisations
(``torchferry.harness.devices.synchronize``). The steady state comes from repetitions interleaved across
the two devices' processes (ref, target, target, ref, ...) so that frequency scaling and
load changes hit both sides, as the dynamo benchmarks do. The headline is time to N steps
from process start, compilation and warm-up included.
"""

from __future__ import annotations

import statistics

from torchferry.report.check import DeviceTiming, TimingResult, TimingStatus


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def device_timing(device: str, worker_timing: dict, steady: list[list[float]], rank: int | None = None) -> DeviceTiming:
    """A device's (or one rank's) timing from the worker's figures and the steady-state rounds run for it."""
    t = DeviceTiming(device=device, rank=rank)
    for key in ("python_start_s", "import_s", "load_s", "first_call_s", "cold_start_s", "time_to_n_s", "flops_per_step"):
        setattr(t, key, worker_timing.get(key))
    t.steps = list(worker_timing.get("steps", []))
    t.units_per_step = worker_timing.get("units_per_step", 0.0)
    t.unit = worker_timing.get("unit", "tokens")
    t.peak_memory = worker_timing.get("peak_memory", {})
    t.compile = worker_timing.get("compile", {})
    ops = worker_timing.get("ops") or {}
    if ops:
        t.fallback_ops = ops["fallback"]
        total = ops.get("executed_total", 0) + sum(ops["fallback"].values())
        t.fallback_share = sum(ops["fallback"].values()) / total if total else 0.0
    samples = [x for round_ in steady for x in round_]
    if samples:
        t.steady = {"median_s": statistics.median(samples), "p90_s": percentile(samples, 90),
                    "samples": len(samples), "rounds": len(steady)}
        if t.units_per_step:
            t.throughput_per_s = t.units_per_step / t.steady["median_s"]
    return t


def summarise(ref: DeviceTiming | None, target: DeviceTiming | None) -> TimingResult:
    status = TimingStatus.MEASURED if ref is not None and target is not None else (
        TimingStatus.PARTIAL if ref is not None or target is not None else TimingStatus.NOT_RUN)
    result = TimingResult(status=status, ref=ref, target=target)
    if ref and target:
        if ref.time_to_n_s and target.time_to_n_s:
            result.speedup_time_to_n = ref.time_to_n_s / target.time_to_n_s
        if ref.steady and target.steady:
            result.speedup_steady = ref.steady["median_s"] / target.steady["median_s"]
        if target.fallback_ops:
            top = sorted(target.fallback_ops.items(), key=lambda kv: -kv[1])[:5]
            result.notes.append("target fell back to the CPU for: " + ", ".join(f"{k} x{v}" for k, v in top))
        if target.fallback_share is None:
            result.notes.append("the target device does not report fallback ops")
        result.notes.append("fallback share is the share of op calls, not of time")
    return result
