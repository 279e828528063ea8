"""The terminal summary: verdict first, then one block per result, every assumption printed."""

from __future__ import annotations

from torchferry.report.check import STOPPED, CheckReport, DeviceTiming
from torchferry.report.comparison import describe


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def mib(peak: dict) -> str:
    return f"{peak['bytes'] / 2**20:.0f} MiB ({peak['source']})" if peak.get("bytes") else "-"


def steady(t: DeviceTiming) -> str:
    return f"{seconds(t.steady.get('median_s'))} / {seconds(t.steady.get('p90_s'))}" if t.steady else "-"


def rank_table(ranks: list[DeviceTiming], steps: int) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-rank timings (``--nproc`` > 1)."""
    header = ["rank", "device", f"time to {steps} steps", "first call", "steady median / p90"]
    return header, [[str(t.rank), t.device, seconds(t.time_to_n_s), seconds(t.first_call_s), steady(t)] for t in ranks]


def _timing_rows(ref: DeviceTiming | None, target: DeviceTiming | None, steps: int) -> list[tuple[str, str, str]]:
    """Rows of the timing table; a side not measured (the run stopped before it) shows ``-``."""
    def pair(get) -> tuple[str, str]:
        return (get(ref) if ref else "-"), (get(target) if target else "-")

    rows = [
        (f"time to {steps} steps (headline)", *pair(lambda t: seconds(t.time_to_n_s))),
        ("process start -> first result", *pair(lambda t: seconds(t.cold_start_s))),
        ("import torch", *pair(lambda t: seconds(t.import_s))),
        ("build + load model", *pair(lambda t: seconds(t.load_s))),
        ("first call", *pair(lambda t: seconds(t.first_call_s))),
        ("steady median / p90", *pair(steady)),
        ("throughput", *pair(lambda t: f"{t.throughput_per_s:,.0f} {t.unit}/s" if t.throughput_per_s else "-")),
        ("peak memory", *pair(lambda t: mib(t.peak_memory))),
        ("fallback ops (share of calls)", *pair(
            lambda t: "not tracked" if t.fallback_share is None else f"{sum(t.fallback_ops.values())} ({t.fallback_share:.1%})")),
    ]
    if (ref and ref.compile) or (target and target.compile):
        rows.append(("compile: graphs / recompilations", *pair(
            lambda t: f"{t.compile.get('graphs')} / {t.compile.get('recompilations')}" if t.compile else "eager")))
    return rows


def render(report: CheckReport, paths: list[str] | None = None) -> str:
    cfg, lines = report.config, []
    add = lines.append
    add(f"ferry check: {cfg['workload']} ({cfg['mode']}, {cfg['dtype']}, {cfg['steps']} steps, size {cfg['size']}) "
        f"{cfg['ref']} -> {cfg['target']}")
    if cfg.get("target_reason"):
        add(f"  target: {cfg['target_reason']}")
    if report.verdict == STOPPED:
        add(f"stopped: {report.failure.kind} during {report.failure.phase or 'the run'}; everything measured before "
            "is below and in the report")
    else:
        add(f"verdict: {report.verdict.upper()}")
    for item in report.verdicts:
        add(f"  {item.result:<7} {item.verdict:<19} {item.reason}")
    p = report.parity
    add("")
    add(f"parity: {p.status} (tol {p.tolerance.get('tol', '-')}, reference deterministic: {p.deterministic})")
    for c in p.outputs[:4]:
        add(f"  output {c.name}: {'pass' if c.passed else 'FAIL'}; {describe(c)}")
    if p.gradients:
        worst = max(p.gradients, key=lambda c: (not c.passed, c.max_abs_diff or 0))
        add(f"  gradients: {sum(c.passed for c in p.gradients)}/{len(p.gradients)} pass; worst {worst.name}: {describe(worst)}")
    if p.loss_curve:
        c = p.loss_curve["comparison"]
        add(f"  loss curve: {'pass' if c.passed else 'FAIL'}; {describe(c)}")
    if p.tokens:
        add(f"  generated tokens: {'exact match' if p.tokens['match'] else 'MISMATCH at index ' + str(p.tokens['first_mismatch'])}")
    if p.first_divergent_module is not None:
        add(f"  first divergent module: {p.first_divergent_module.name}: {describe(p.first_divergent_module)}")
    for note in p.notes:
        add(f"  note: {note}")
    t = report.timing
    if t.ref or t.target:
        add("")
        add(f"time (explicitly synchronised){' - partial' if t.status == 'partial' else ''}:")
        add(f"  {'':<32}{'ref ' + (t.ref.device if t.ref else '-'):>30}{'target ' + (t.target.device if t.target else '-'):>42}")
        for label, a, b in _timing_rows(t.ref, t.target, cfg["steps"]):
            add(f"  {label:<32}{a:>30}{b:>42}")
        if t.ranks:
            header, rows = rank_table(t.ranks, cfg["steps"])
            add(f"  per rank ({len(t.ranks)} DDP processes):")
            add("    " + "".join(f"{h:<22}" for h in header).rstrip())
            for row in rows:
                add("    " + "".join(f"{c:<22}" for c in row).rstrip())
        if t.speedup_time_to_n:
            add(f"  target speed-up: {t.speedup_time_to_n:.2f}x time to N, {t.speedup_steady or 0:.2f}x steady state")
        for note in t.notes:
            add(f"  note: {note}")
    r = report.resume
    add("")
    add(f"resume: {r.status}" + (f" (saved after step {r.saved_at_step}, max |diff| {r.max_abs_diff:.3g})" if r.max_abs_diff is not None else ""))
    for note in r.notes:
        add(f"  note: {note}")
    e = report.exit
    add(f"exit: {e.status} (reloaded on {e.loader_device or '-'}; torchferry absent in the loader: {e.torchferry_absent})")
    for f in e.formats:
        state = ("loads" if f.loads_plain else "not reloaded" if f.skipped else "needs map_location" if f.needs_map_location
                 else "FAILS")
        figures = f"; parity {'pass' if f.parity.passed else 'FAIL'} ({describe(f.parity)})" if f.parity else ""
        add(f"  {f.name}: {state}{figures}")
        if f.error and not f.loads_plain:
            add(f"    error: {f.error}")
        if f.fix:
            add(f"    fix: {f.fix}")
        if f.skipped:
            add(f"    why: {f.skipped}")
    c = report.cost
    if c.devices:
        add("")
        add("cost:")
        for row in c.devices:
            util = f"{row['utilisation']:.2%}" if row.get("utilisation") is not None else "n/a"
            add(f"  {row['role']} {row['device']}: {money(row.get('cost_per_unit'))} per {row['unit']} "
                f"as {row.get('instance') or 'unpriced'}; utilisation {util}")
        be = c.break_even
        add(f"  break-even: {be.get('status')}" + (f" after {be['units']:,.0f} units ({be['months']:.2f} months)" if be.get("months") else ""))
        for note in c.assumptions:
            add(f"  assumption: {note}")
    if report.failure:
        add("")
        f = report.failure
        if f.finding:
            add(f"target failed ({f.kind}): {f.message}")
        else:
            add(f"stopped: {f.kind}: {f.message}" + (f" (details: {f.log})" if f.log else ""))
    if paths:
        add("")
        add("report: " + ", ".join(paths))
    return "\n".join(lines) + "\n"
