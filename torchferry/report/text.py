"""The terminal summary: verdict first, then one block per result, every assumption printed."""

from __future__ import annotations

from torchferry.report.check import STOPPED, CheckReport, DeviceTiming, RehearsalResult, TimingResult
from torchferry.report.comparison import describe


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.3g}" if value < 0.01 else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def mib(peak: dict) -> str:
    return f"{peak['bytes'] / 2**20:.0f} MiB ({peak['source']})" if peak.get("bytes") else "-"


def steady(t: DeviceTiming) -> str:
    return f"{seconds(t.steady.get('median_s'))} / {seconds(t.steady.get('p90_s'))}" if t.steady else "-"


def span(t: TimingResult) -> str:
    """What "time to N" covers: ``8 steps``, ``7 backward calls``, or the last step of a run cut short."""
    return f"{t.steps} {t.step_unit}" if t.steps else "the last step"


def rank_table(ranks: list[DeviceTiming], covered: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-rank timings (``--nproc`` > 1)."""
    header = ["rank", "device", f"time to {covered}", "first call", "steady median / p90"]
    return header, [[str(t.rank), t.device, seconds(t.time_to_n_s), seconds(t.first_call_s), steady(t)] for t in ranks]


def _timing_rows(ref: DeviceTiming | None, target: DeviceTiming | None, covered: str) -> list[tuple[str, str, str]]:
    """Rows of the timing table; a side not measured (the run stopped before it) shows ``-``."""
    def pair(get) -> tuple[str, str]:
        return (get(ref) if ref else "-"), (get(target) if target else "-")

    rows = [
        (f"time to {covered} (headline)", *pair(lambda t: seconds(t.time_to_n_s))),
        ("process start -> first result", *pair(lambda t: seconds(t.cold_start_s))),
        ("import torch", *pair(lambda t: seconds(t.import_s))),
        ("build + load model", *pair(lambda t: seconds(t.load_s))),
        ("first call", *pair(lambda t: seconds(t.first_call_s))),
        ("steady median / p90", *pair(steady)),
        ("steady CV / round spread", *pair(stability)),
        ("throughput", *pair(lambda t: f"{t.throughput_per_s:,.0f} {t.unit}/s" if t.throughput_per_s else "-")),
        ("peak memory", *pair(lambda t: mib(t.peak_memory))),
        *([("warm-up above steady (steps)", *pair(lambda t: seconds(t.warmup_s))),
           ("whole run (process start -> exit)", *pair(lambda t: seconds(t.run_s)))]
          if (ref and ref.run_s is not None) or (target and target.run_s is not None) else []),
        ("fallback ops (share of calls)", *pair(
            lambda t: "not tracked" if t.fallback_share is None else f"{sum(t.fallback_ops.values())} ({t.fallback_share:.1%})")),
    ]
    if (ref and ref.compile) or (target and target.compile):
        rows.append(("compile: graphs / recompilations", *pair(
            lambda t: f"{t.compile.get('graphs')} / {t.compile.get('recompilations')}" if t.compile else "eager")))
    return rows


def stability(t: DeviceTiming) -> str:
    """The steady state's coefficient of variation and round-median spread, flagged when over their limits."""
    s = t.stability
    if s.get("cv") is None:
        return "-"
    spread = f"{s['round_spread']:.0%}" if s.get("round_spread") is not None else "-"
    return f"{s['cv']:.0%} / {spread}" + (" UNSTABLE" if s.get("stable") is False else "")


def side(role: str, t: DeviceTiming | None) -> str:
    """A timing column's title; an emulating device's says its times are the host's."""
    if t is None:
        return f"{role} -"
    return f"{role} {t.device}" + (f" (emulating {t.emulates}: host cost)" if t.emulates else "")


def speedup_line(t: TimingResult) -> str | None:
    if not t.speedup_time_to_n:
        return None
    if t.target and t.target.emulates:
        return (f"emulation cost on this host: the target takes {1 / t.speedup_time_to_n:.2f}x the reference's time to N "
                f"and {1 / (t.speedup_steady or t.speedup_time_to_n):.2f}x its steady step (not {t.target.emulates}'s times)")
    return f"target speed-up: {t.speedup_time_to_n:.2f}x time to N, {t.speedup_steady or 0:.2f}x steady state"


def traces(t: TimingResult) -> list[tuple[str, str]]:
    """(who, path) of every torch.profiler trace written (--profile)."""
    sides = [("ref", t.ref)] + ([("target", t.target)] if not t.ranks else [(f"target rank {d.rank}", d) for d in t.ranks])
    return [(f"{role} {d.device}", d.profile_trace) for role, d in sides if d is not None and d.profile_trace]


def device_cost(row: dict) -> str:
    """One device's measured cost, or why it has none."""
    if row.get("cost_per_unit") is not None:
        util = f"{row['utilisation'] * 100:.3g}%" if row.get("utilisation") is not None else "n/a"
        return f"{money(row['cost_per_unit'])} per {row['unit']} as {row['instance']} (measured); utilisation {util}"
    if row.get("instance") is None:
        return "unpriced"
    return f"not priced from its throughput here (see the projection for {row['instance']})"


def projection_table(p: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the target's cost at stated fractions of its peak."""
    unit = p["unit"].split(" ", 1)[1]
    header = ["utilisation", "step", f"{unit}/s", f"$ per {p['unit']}", "engineering recovered after"]
    rows = [[f"{r['utilisation']:.0%}", seconds(r["step_s"]), f"{r['throughput_per_s']:,.0f}", money(r["cost_per_unit"]),
             f"{r['break_even_units']:,.0f} {unit}" if r["break_even_units"] else "-"] for r in p["rows"]]
    return header, rows


def projection_summary(p: dict) -> list[str]:
    """The projection's basis, roofline bound and break-even utilisation, one line each."""
    if p.get("status") != "computed":
        return [f"projection: {p.get('status', 'not computed')}"]
    unit = p["unit"].split(" ", 1)[1].rstrip("s")
    be = p["break_even_utilisation"]
    return [
        f"projection for {p['instance']} ({p['accelerators_used']} accelerator(s), peak {p['dtype']} "
        f"{p['peak_flops_per_accelerator'] / 1e12:,.1f} TFLOP/s each): {p['flops_per_step']:.3g} FLOPs per step, "
        f"{p['flops_per_unit']:.3g} per {unit}",
        f"roofline lower bound of the step: {seconds(p['roofline_step_s'])} (100% of peak: "
        f"{money(p['cost_per_unit_at_peak'])} per {p['unit']})",
        "break-even utilisation: " + ("n/a (the reference has no price)" if be is None else
                                      f"{be * 100:.3g}% of peak" + (" (above 100%: never)" if be > 1 else "")),
    ]


SERIES_SHOWN = 8  # a per-step series longer than this is summarised, not listed


def series(values: list[float | int], first_step: int = 1) -> str:
    """A per-step series in a few words: all of it when short; else its first and last values, its maximum and the
    steps where it changes (what a reader looks for in 60 numbers)."""
    if not values:
        return "-"
    if len(values) <= SERIES_SHOWN:
        return ", ".join(f"{v:g}" for v in values)
    top = max(range(len(values)), key=lambda i: values[i])
    changes = [i + first_step for i in range(1, len(values)) if values[i] != values[i - 1]]
    shown = ", ".join(map(str, changes[:5])) + (f" and {len(changes) - 5} more" if len(changes) > 5 else "")
    return (f"{len(values)} steps: first {values[0]:g}, last {values[-1]:g}, max {values[top]:g} (step "
            f"{top + first_step}); changes at {'steps ' + shown if changes else 'no step'}")


def syncs_per_step(r: RehearsalResult) -> str:
    """Host syncs of each step, with their causes over the run."""
    if not r.host_syncs_per_step:
        return "-"
    causes: dict[str, int] = {}
    for step in r.host_syncs_per_step:
        for cause, n in step.items():
            causes[cause] = causes.get(cause, 0) + n
    per_step = series([sum(step.values()) for step in r.host_syncs_per_step])
    return per_step + (f" ({', '.join(f'{c} x{n}' for c, n in sorted(causes.items()))})" if causes else "")


def rehearsal_rows(r: RehearsalResult) -> list[tuple[str, str]]:
    """The rehearsal's figures as (label, value) rows; the terminal and the HTML show the same ones."""
    time_share = f", {r.fallback_share_of_time:.2%} of device-op time here" if r.fallback_share_of_time is not None else ""
    shares = f" ({r.fallback_share_of_calls:.2%}{time_share})" if r.fallback_share_of_calls is not None else ""
    rows = [
        ("predicted host fallbacks", f"{len(r.fallbacks)} ops, {r.fallback_calls} of {r.op_calls} calls{shares}"),
        ("host syncs per step", syncs_per_step(r)),
        ("eager signatures, step 1", "-" if r.signatures_step1 is None else str(r.signatures_step1)),
        ("new signatures, steps 2..N", series(r.new_signatures, first_step=2)),
        ("cold compilations / cache hits", f"{r.compilations} / {r.cache_hits}"),
        ("batch shapes that changed", "; ".join(r.shape_changes) or "none"),
    ]
    if r.compile is not None:
        frames = "; ".join(f"frame {f.frame}: {f.graphs} graphs, {f.recompiles} recompiles" for f in r.compile.frames)
        breaks = sum(b.get("count", 0) for b in r.compile.graph_breaks)
        rows += [("compiled graphs", f"{r.compile.graphs} ({frames or 'no frames'})"), ("graph breaks", str(breaks))]
    n = r.numerics
    rows.append(("numerics", (n.mode or "-") + (f"; host-numerics rerun: {n.host_parity or 'failed'}" if n.rerun else "")
                 + (f"; first module narrowing changes: {n.first_diverging_module}" if n.first_diverging_module else "")))
    if r.memory:
        m = r.memory
        rows.append(("peak device memory", f"{m['peak_bytes'] / 2**20:.1f} MiB of {m['capacity_bytes'] / 2**30:.0f} GiB "
                                           f"per device ({m['share']:.2%})"))
    if r.placement is not None:
        p = r.placement
        rows.append(("placement", f"{p.op} mixes {', '.join(p.devices)} at {p.file}:{p.line}: {p.code}"))
    return rows


def render(report: CheckReport, paths: list[str] | None = None) -> str:
    """The terminal summary: what ran, the verdict and what to do first, then one block per result."""
    lines = [*_header(report), *_verdict(report), *_parity(report), *_timing(report), *_resume_and_exit(report),
             *_rehearsal(report), *_cost(report), *_failure(report)]
    if paths:
        lines += ["", "report: " + ", ".join(paths)]
    return "\n".join(lines) + "\n"


def _header(report: CheckReport) -> list[str]:
    cfg, facts = report.config, report.script
    lines = [f"ferry check: {report.subject}"]
    if facts is not None and facts.seeded:
        lines.append(f"  seeded: {facts.seeded}")
    if facts is not None and facts.forward_calls:
        lines.append(f"  recorded on the reference: {facts.forward_calls} calls of the model and no backward (inference)"
                     + (f"; stopped: {facts.stopped}" if facts.stopped else ""))
    elif facts is not None and (facts.optimizer_steps or facts.backward_calls):
        lines.append(f"  recorded on the reference: {facts.optimizer_steps} optimizer steps, {facts.backward_calls} "
                     f"backward calls, {facts.losses} losses" + (f"; stopped: {facts.stopped}" if facts.stopped else ""))
    lines += [f"  files: {line}" for line in (facts.files if facts is not None else [])]
    if cfg.get("target_reason"):
        lines.append(f"  target: {cfg['target_reason']}")
    if execution := cfg.get("source", {}).get("execution"):
        lines.append(f"  runs: {execution}; every step reseeded from --seed {cfg['seed']} + step")
    return lines


def _verdict(report: CheckReport) -> list[str]:
    if report.verdict == STOPPED:
        lines = [f"stopped: {report.failure.kind} during {report.failure.phase or 'the run'}; everything measured "
                 "before is below and in the report"]
    else:
        lines = [f"verdict: {report.verdict.upper()}" + (f": {report.decision}" if report.decision else "")]
    lines += [f"  {item.result:<9} {item.verdict:<19} "
              + ("(the verdict line above)" if report.decision == f"{item.result}: {item.reason}" else item.reason)
              for item in report.verdicts]
    if report.next_actions:
        lines.append("next actions:")
        lines += [f"  {number}. {a.result}: {a.action}" for number, a in enumerate(report.next_actions, 1)]
    return lines


def _parity(report: CheckReport) -> list[str]:
    p = report.parity
    deterministic = "" if p.deterministic is None else f", reference deterministic: {p.deterministic}"
    lines = ["", f"parity: {p.status} (tol {p.tolerance.get('tol', '-')}{deterministic})"]
    lines += [f"  output {c.name}: {'pass' if c.passed else 'FAIL'}; {describe(c)}" for c in p.outputs[:4]]
    if p.gradients:
        worst = max(p.gradients, key=lambda c: (not c.passed, c.max_abs_diff or 0))
        lines.append(f"  gradients: {sum(c.passed for c in p.gradients)}/{len(p.gradients)} pass; worst {worst.name}: "
                     f"{describe(worst)}")
    for name, recorded in (("loss curve", p.loss_curve), ("gradient norms", p.grad_norm_curve)):
        if recorded:
            c = recorded["comparison"]
            rule = f" ({recorded['rule']}, {len(recorded['target'])} values)" if "rule" in recorded else ""
            lines.append(f"  {name}: {'pass' if c.passed else 'FAIL'}{rule}; {describe(c)}")
    if p.tokens:
        lines.append(f"  generated tokens: {'exact match' if p.tokens['match'] else 'MISMATCH at index ' + str(p.tokens['first_mismatch'])}")
    # each thing once: what the verdict line already says (a note, the first divergent module and its figures)
    # is not repeated among the details
    said = next((item.reason for item in report.verdicts if item.result == "parity"), "")
    module = describe(p.first_divergent_module) if p.first_divergent_module is not None else None
    if module is not None and module not in said:
        lines.append(f"  first divergent module: {p.first_divergent_module.name}: {module}")
    lines += [f"  note: {note}" for note in p.notes if note not in said and (module is None or module not in note)]
    return lines


def _timing(report: CheckReport) -> list[str]:
    t = report.timing
    if not (t.ref or t.target):
        return []
    lines = ["", f"time (explicitly synchronised){' - partial' if t.status == 'partial' else ''}:",
             f"  {'':<32}{side('ref', t.ref):>30}{side('target', t.target):>42}"]
    lines += [f"  {label:<32}{a:>30}{b:>42}" for label, a, b in _timing_rows(t.ref, t.target, span(t))]
    if t.ranks:
        header, rows = rank_table(t.ranks, span(t))
        lines += [f"  per rank ({len(t.ranks)} DDP processes):", "    " + "".join(f"{h:<22}" for h in header).rstrip()]
        lines += ["    " + "".join(f"{c:<22}" for c in row).rstrip() for row in rows]
    if line := speedup_line(t):
        lines.append(f"  {line}")
    lines += [f"  WARNING: {warning}" for warning in t.warnings]
    lines += [f"  trace ({who}): {path}" for who, path in traces(t)]
    return lines + [f"  note: {note}" for note in t.notes]


def _resume_and_exit(report: CheckReport) -> list[str]:
    r, e = report.resume, report.exit
    lines = ["", f"resume: {r.status}" + (f" (saved after step {r.saved_at_step}, max |diff| {r.max_abs_diff:.3g})"
                                          if r.max_abs_diff is not None else "")]
    lines += [f"  note: {note}" for note in r.notes]
    lines.append(f"exit: {e.status} (reloaded on {e.loader_device or '-'}; torchferry absent in the loader: "
                 f"{e.torchferry_absent})")
    for f in e.formats:
        state = ("loads" if f.loads_plain else "not reloaded" if f.skipped else "needs map_location" if f.needs_map_location
                 else "FAILS")
        figures = f"; parity {'pass' if f.parity.passed else 'FAIL'} ({describe(f.parity)})" if f.parity else ""
        lines.append(f"  {f.name}: {state}{figures}")
        if f.error and not f.loads_plain:
            lines.append(f"    error: {f.error}")
        if f.fix:
            lines.append(f"    fix: {f.fix}")
        if f.skipped:
            lines.append(f"    why: {f.skipped}")
    return lines


def _rehearsal(report: CheckReport) -> list[str]:
    rh = report.rehearsal
    if rh.status == "not-run":
        return []
    lines = ["", f"rehearsal of {rh.emulates}: {rh.status} (predictions about {rh.emulates} from this emulation; not "
                 "timings)"]
    lines += [f"  {label:<32}{value}" for label, value in rehearsal_rows(rh)]
    lines += [f"    {f.op} x{f.calls}: {f.reason}" for f in rh.fallbacks[:5]]
    lines += [f"  known issue ({k.kind}): {k.op} x{k.calls}: {k.reason} ({k.scope}; {k.source})" for k in rh.known_issues]
    if rh.numerics.note:
        lines.append(f"  numerics: {rh.numerics.note}")
    lines += [f"  note: {note}" for note in rh.notes]
    return lines + [f"  condition: {condition}" for condition in rh.conditions]


def _cost(report: CheckReport) -> list[str]:
    c = report.cost
    if not c.devices:
        return []
    lines = ["", "cost:", *(f"  {row['role']} {row['device']}: {device_cost(row)}" for row in c.devices)]
    if c.projection:
        lines += [f"  {line}" for line in projection_summary(c.projection)]
        if c.projection.get("rows"):
            header, rows = projection_table(c.projection)
            widths = [max(len(line[i]) for line in [header, *rows]) + 2 for i in range(len(header))]
            lines += ["    " + "".join(f"{v:<{w}}" for v, w in zip(line, widths)).rstrip() for line in [header, *rows]]
    be = c.break_even
    lines.append(f"  break-even: {be.get('status')}" + (f" after {be['units']:,.0f} units ({be['months']:.2f} months)"
                                                        if be.get("months") else ""))
    return lines + [f"  assumption: {note}" for note in c.assumptions]


def _failure(report: CheckReport) -> list[str]:
    f = report.failure
    if not f:
        return []
    if f.finding:
        return ["", f"target failed ({f.kind}): {f.message}"]
    return ["", f"stopped: {f.kind}: {f.message}" + (f" (details: {f.log})" if f.log else "")]
