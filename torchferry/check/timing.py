"""Full time: cold start, import and load, first call, warm-up curve, interleaved steady state.

Every step is measured by the worker between two explicit device synchronisations
(``torchferry.harness.devices.synchronize``). The steady state comes from repetitions interleaved across
the two devices' processes (ref, target, target, ref, ...) so that frequency scaling and
load changes hit both sides, as the dynamo benchmarks do. The headline is time to N steps
from process start, compilation and warm-up included.

Steady-state figures are judged for stability: the coefficient of variation of all samples
and the spread of the round medians (max - min over the pooled median). Above either limit
the runner adds rounds while ``--steady-budget`` lasts, and every report warns when the
figures stay unstable. A target that emulates another device (``DeviceTiming.emulates``)
is timed like any other, but its figures are the cost of the emulation on this host: they
are labelled so and never decide the time result.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torchferry.harness.devices import Memory
from torchferry.harness.protocol import T0_ENV
from torchferry.harness.window import Compiled, Reading
from torchferry.records import Record
from torchferry.report.check import DeviceTiming, TimingResult, TimingStatus

MAX_CV = 0.10  # pyperf's rule: a standard deviation above 10% of the mean makes a benchmark unstable
MAX_ROUND_SPREAD = 0.10  # round medians further apart than 10% of the pooled median: load changed between rounds
COLD_START = ("process start -> first result includes starting Python, import torch (and the workload's libraries), "
              "building the model and moving it to the device, and the first step (compilation included)")
WARMED = "; a throwaway process imported and built everything once before, so neither device paid a cold page cache"
NOT_WARMED = ("; no warm-up process ran (TORCHFERRY_CHECK_WARMUP=0): the reference started first and may alone have "
              "paid a cold page cache")


def stability(rounds: list[list[float]]) -> dict:
    """Coefficient of variation and round-median spread of the steady samples; ``stable`` None when unjudgeable."""
    samples = [x for round_ in rounds for x in round_]
    found: dict = {"cv": None, "round_spread": None, "stable": None, "rounds": len([r for r in rounds if r]),
                   "max_cv": MAX_CV, "max_round_spread": MAX_ROUND_SPREAD}
    if len(samples) < 2:
        return found
    median = statistics.median(samples)
    found["cv"] = statistics.stdev(samples) / statistics.fmean(samples)
    medians = [statistics.median(r) for r in rounds if r]
    if len(medians) > 1:
        found["round_spread"] = (max(medians) - min(medians)) / median
    found["stable"] = found["cv"] <= MAX_CV and (found["round_spread"] or 0.0) <= MAX_ROUND_SPREAD
    return found


def instability(role: str, t: DeviceTiming) -> str | None:
    """The warning for unstable steady-state figures, or None."""
    s = t.stability
    if s.get("stable") is not False:
        return None
    spread = f", round medians {s['round_spread']:.0%} apart (limit {s['max_round_spread']:.0%})" if s["round_spread"] else ""
    return (f"unstable: {role} {t.device} steady state varies {s['cv']:.0%} (CV, limit {s['max_cv']:.0%}){spread} "
            f"over {s['rounds']} rounds; its steady figures and speed-ups are not reliable. Rerun on a quiet machine "
            "or raise --steady-budget")


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass(kw_only=True)
class StepFigures(Record):
    """The wall-clock figures one worker (or one rank) measured, from the runner's clock just before the spawn, and
    the measurement window around its timed run (``reading``: peak memory, op counts, compile figures)."""

    python_start_s: float | None = None
    import_s: float | None = None
    load_s: float | None = None
    first_call_s: float | None = None
    cold_start_s: float | None = None
    time_to_n_s: float | None = None
    steps: list[float] = field(default_factory=list)
    emulates: str | None = None
    units_per_step: float = 0.0
    unit: str = "tokens"
    flops_per_step: float | None = None
    reading: Reading | None = None


class StepClock:
    """The capture half of the wall-clock figures, in the worker: times from the runner's clock just before the
    spawn (``T0_ENV``), less the time spent saving checkpoints inside the timed run (``excluded``), so that a
    resume checkpoint never counts as training time. ``figures`` is what ``device_timing`` reads back."""

    def __init__(self, process_start: float, steps: int) -> None:
        self.t0 = float(os.environ.get(T0_ENV, process_start))
        self.steps = steps
        self.figures = StepFigures(python_start_s=process_start - self.t0)
        self.excluded_s = 0.0

    @contextlib.contextmanager
    def lap(self, key: str) -> Iterator[None]:
        """The seconds this block takes, recorded as the figure ``key`` (import_s, load_s)."""
        start = time.perf_counter()
        yield
        setattr(self.figures, key, time.perf_counter() - start)

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Time inside this block is taken out of every later figure."""
        start = time.perf_counter()
        yield
        self.excluded_s += time.perf_counter() - start

    def stepped(self, index: int, seconds: float) -> str | None:
        """Record timed step ``index`` (its call took ``seconds``); the progress line after the first step."""
        now = time.time() - self.t0 - self.excluded_s
        if index == 0:
            self.figures.first_call_s, self.figures.cold_start_s = seconds, now
        if index + 1 == self.steps:
            self.figures.time_to_n_s = now
        return f"first result after {now:.1f} s (first call {seconds * 1e3:.0f} ms)" if index == 0 else None


def _compile_figures(c: Compiled | None) -> dict[str, Any]:
    """Dynamo's graph counts, plus the device backend's per-graph records where it keeps them."""
    if c is None:
        return {}
    found: dict[str, Any] = {"backend": c.backend, "graphs": c.graphs, "recompilations": c.recompilations,
                             "graph_breaks": c.break_count}
    if c.device_graphs is not None:
        graphs = c.device_graphs
        found.update(
            compiled_graphs=len(graphs),
            compile_s=sum(g.get("torch_neuronx_compile_us", 0) for g in graphs) / 1e6,
            cache_hits=sum(g.get("cache") == "hit" for g in graphs),
            cache_misses=sum(g.get("cache") == "miss" for g in graphs),
            graph_break_reasons=[{"reason": reason, "count": n} for reason, n in c.counted_breaks.items()],
            per_graph=[{k: g.get(k) for k in ("graph_name", "graph_node_count", "torch_neuronx_compile_us", "cache")}
                       for g in graphs],
        )
    return found


def device_timing(device: str, figures: StepFigures, steady: list[list[float]], rank: int | None = None,
                  flops_per_step: float | None = None) -> DeviceTiming:
    """A device's (or one rank's) timing from its worker's figures and the steady-state rounds run for it;
    ``flops_per_step``: the reference's, where this worker did not count its own."""
    t = DeviceTiming(device=device, rank=rank)
    for key in ("python_start_s", "import_s", "load_s", "first_call_s", "cold_start_s", "time_to_n_s", "emulates",
                "units_per_step", "unit"):
        setattr(t, key, getattr(figures, key))
    t.flops_per_step = figures.flops_per_step if figures.flops_per_step is not None else flops_per_step
    t.steps = list(figures.steps)
    reading = figures.reading
    if reading is not None:
        t.peak_memory = reading.memory.to_dict()
        t.compile = _compile_figures(reading.compiled)
        if reading.ops is not None:
            t.fallback_ops = dict(reading.ops.fallback)
            total = reading.ops.executed + reading.ops.fallback_calls
            t.fallback_share = reading.ops.fallback_calls / total if total else 0.0
    samples = [x for round_ in steady for x in round_]
    if samples:
        t.steady = {"median_s": statistics.median(samples), "p90_s": percentile(samples, 90),
                    "samples": len(samples), "rounds": len(steady)}
        if t.units_per_step:
            t.throughput_per_s = t.units_per_step / t.steady["median_s"]
    t.stability = stability(steady)
    return t


WARMUP_SHARE = 0.5  # a script's steady step is the median of the steps after this share of its run


def script_timing(device: str, run_s: float | None, step_ends_s: list[float], peak: Memory | None,
                  ops: tuple[int, dict[str, int]] | None, emulates: str | None,
                  left_out_steps: range = range(0)) -> DeviceTiming:
    """A script run's times, from its step ends (seconds from the spawn): to the first step, the warm-up, the steady
    step (the median of the later steps) and the whole run; ``ops``: (executed, fallback by op) where the device
    counts them; ``left_out_steps``: steps (from 1) whose durations the step figures leave out (they ran under the
    FLOP counter), though the times to the first and the last step include them."""
    durations = [b - a for i, (a, b) in enumerate(zip(step_ends_s, step_ends_s[1:]))
                 if i + 2 not in left_out_steps]  # the i-th duration is step i + 2's
    steady = durations[int(len(durations) * WARMUP_SHARE):] if durations else []
    figures = StepFigures(cold_start_s=step_ends_s[0] if step_ends_s else None,
                          time_to_n_s=step_ends_s[-1] if step_ends_s else None,
                          first_call_s=durations[0] if durations else None, steps=durations, emulates=emulates,
                          unit="steps", units_per_step=1.0)
    t = device_timing(device, figures, [steady] if steady else [])
    t.peak_memory = peak.to_dict() if peak is not None else {}
    if ops is not None:
        executed, fallback = ops
        t.fallback_ops = fallback
        total = executed + sum(fallback.values())
        t.fallback_share = sum(fallback.values()) / total if total else 0.0
    t.run_s = run_s
    if steady:
        median = statistics.median(steady)
        t.warmup_s = sum(d - median for d in durations[: int(len(durations) * WARMUP_SHARE)] if d > median)
    return t


def summarise(ref: DeviceTiming | None, target: DeviceTiming | None, warmed: bool = True,
              steps: int | None = None) -> TimingResult:
    """The timing result of both sides (either may be missing when the run stopped); ``warmed``: whether the warm-up
    process ran before them (what the cold-start figures include); ``steps``: the steps "time to N" covers."""
    status = TimingStatus.MEASURED if ref is not None and target is not None else (
        TimingStatus.PARTIAL if ref is not None or target is not None else TimingStatus.NOT_RUN)
    result = TimingResult(status=status, ref=ref, target=target, steps=steps)
    for role, t in (("ref", ref), ("target", target)):
        if t is not None and t.emulates:
            result.notes.append(f"{role} {t.device} emulates {t.emulates} on this host: its times are the cost of the "
                                f"emulation here, not {t.emulates}'s, and do not decide the time result")
        if t is not None and (warning := instability(role, t)):
            result.warnings.append(warning)
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
    if ref or target:
        result.notes.append(COLD_START + (WARMED if warmed else NOT_WARMED))
    return result
