"""`ferry check`'s HTML report: one self-contained file (the shared page shell of
torchferry/report/page.py), inline CSS and SVG plots, no script, nothing fetched.

Data preparation (the sections) is kept apart from the markup (the page shell and the small
table helpers), as coverage.py's HTML reporter does.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from torchferry.report.check import CheckReport
from torchferry.report.comparison import describe, ratio
from torchferry.report import svg
from torchferry.report.page import page

STYLE = (".go{color:#1a7f37} .no-go{color:#cf222e} .go-with-conditions{color:#9a6700} .not-run{color:#777} "
         ".verdict{font-size:1.4em;margin:.3em 0} #next-actions li{margin:.25em 0} details summary{cursor:pointer}")


def table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def section(sid: str, title: str, *parts: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>\n' + "\n".join(parts) + "\n</section>"


def notes(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in items) + "</ul>" if items else ""


FLAT = 1e-3  # a chart whose series differ by less than this share of their range (under a pixel) shows nothing


def coincide(series: dict[str, list[float]]) -> float | None:
    """The largest gap between the series when they coincide (a chart of them would show one line), else None."""
    lists = [[v for v in vs if v is not None and math.isfinite(v)] for vs in series.values()]
    if len(lists) < 2 or not lists[0] or any(len(vs) != len(lists[0]) for vs in lists):
        return None
    flat = [v for vs in lists for v in vs]
    scale = max(max(flat) - min(flat), max(abs(v) for v in flat), 1e-30)
    gap = max(abs(a - b) for vs in lists[1:] for a, b in zip(lists[0], vs))
    return gap if gap <= FLAT * scale else None


def _parity(r: CheckReport) -> str:
    p = r.parity
    rows = [[c.name, "pass" if c.passed else "FAIL", c.status, describe(c)] for c in p.outputs + p.gradients]
    if p.loss_curve:
        c = p.loss_curve["comparison"]
        rows.append([c.name, "pass" if c.passed else "FAIL", c.status, describe(c)])
    plots, sentences = [], []
    if p.loss_curve:
        curves = {f"ref {r.config['ref']}": p.loss_curve["ref"], f"target {r.config['target']}": p.loss_curve["target"],
                  **({"fp64 golden": p.loss_curve["fp64"]} if "fp64" in p.loss_curve else {})}
        gap = coincide(curves)
        if gap is None:
            plots.append(svg.line_chart("loss", "Loss curves", curves, "step", "loss"))
        else:
            sentences.append(f"The loss curves of {', '.join(curves)} coincide over {len(p.loss_curve['ref'])} steps "
                             f"(largest gap {gap:.3g}), so no chart is drawn.")
    bars = [(m.name, ratio(m)) for m in p.modules]
    bars = [(n, v if v is not None and math.isfinite(v) else None) for n, v in bars]
    finite = [v for _, v in bars if v is not None]
    if finite and all(abs(v - 1) <= FLAT for v in finite):
        sentences.append(f"Every module's error ratio, rmse(target) / rmse(ref) against fp64, is 1.00 ({len(finite)} "
                         "modules): the target's error is the reference's, so no chart is drawn.")
    elif p.modules:
        plots.append(svg.bar_chart("module-error", "Per-module error: rmse(target) / rmse(ref) vs fp64", bars, "ratio",
                                   highlight=p.first_divergent_module.name if p.first_divergent_module else None))
    first = (f"<p id=\"first-divergent\">First divergent module: <code>{escape(p.first_divergent_module.name)}</code>: "
             f"{escape(describe(p.first_divergent_module))}</p>") if p.first_divergent_module else ""
    tokens = (f"<p>Generated tokens: {'exact match' if p.tokens['match'] else 'mismatch at ' + str(p.tokens['first_mismatch'])}</p>"
              if p.tokens else "")
    modules = [[m.name, "pass" if m.passed else "FAIL", describe(m)] for m in p.modules]
    failing = [row for row in rows if row[1] == "FAIL"] + [[m[0], m[1], "module", m[2]] for m in modules if m[1] == "FAIL"]
    passed = len(rows) + len(modules) - len(failing)
    details = (table(["tensor", "result", "status", "figures"], [row for row in rows if row[1] != "FAIL"])
               + table(["module (execution order)", "result", "figures"], [m for m in modules if m[1] != "FAIL"]))
    folded = (f'<details id="parity-passing"><summary>{"All " if not failing else ""}{passed} parity checks pass '
              f"(outputs, gradients, loss curve, {len(modules)} modules in execution order): open to list them</summary>"
              f"{details}</details>") if passed else ""
    return section("parity", "Parity",
                   f"<p>Status <strong>{escape(p.status)}</strong>; "
                   + ("" if p.deterministic is None else f"reference deterministic: {p.deterministic}; ")
                   + f"rule: {escape(str(p.tolerance.get('rule', '')))}; tol {p.tolerance.get('tol')}; "
                   f"multiplier {escape(str(p.tolerance.get('multiplier', '')))}.</p>",
                   first, tokens, table(["failing check", "result", "status", "figures"], failing) if failing else "",
                   folded, notes(sentences), f'<div class="plots">{"".join(plots)}</div>' if plots else "", notes(p.notes))


def _timing(r: CheckReport) -> str:
    t = r.timing
    if not (t.ref or t.target):
        return section("timing", "Full time", "<p>Not measured.</p>", notes(t.notes))
    from torchferry.report.text import _timing_rows, rank_table, side, span, speedup_line, traces

    rows = [list(row) for row in _timing_rows(t.ref, t.target, span(t))]
    sides = [(role, d) for role, d in (("ref", t.ref), ("target", t.target)) if d is not None]
    warm = svg.line_chart("warmup", "Warm-up curve (per-step time, synchronised)",
                          {f"{role} {d.device}": [s * 1e3 for s in d.steps] for role, d in sides}, "step", "ms")
    time_bars = svg.bar_chart("time-to-n", f"Time to {span(t)} from process start",
                              [(f"{role} {d.device}", d.time_to_n_s) for role, d in sides], "s")
    ranks = ""
    if t.ranks:
        ranks = f'<h3 id="ranks">Target per rank ({len(t.ranks)} DDP processes)</h3>' + table(*rank_table(t.ranks, span(t)))
    header = ["", side("ref", t.ref), side("target", t.target)]
    warnings = "".join(f'<p class="no-go timing-warning">Warning: {escape(w)}</p>' for w in t.warnings)
    speedup = f"<p>{escape(line)}</p>" if (line := speedup_line(t)) else ""
    # the traces lie beside report.html: relative links keep the report folder movable
    links = ('<h3 id="profile">torch.profiler traces (Chrome trace JSON: chrome://tracing or ui.perfetto.dev)</h3><ul>'
             + "".join(f'<li>{escape(who)}: <a href="{escape(Path(path).name)}">{escape(Path(path).name)}</a></li>'
                       for who, path in traces(t)) + "</ul>") if traces(t) else ""
    return section("timing", "Full time", warnings, table(header, rows), speedup, ranks,
                   f'<div class="plots">{warm}{time_bars}</div>', links, notes(t.notes))


def _cost(r: CheckReport) -> str:
    from torchferry.report.text import device_cost, projection_summary, projection_table

    c = r.cost
    rows = [[row["role"], row["device"], row.get("instance") or "unpriced", device_cost(row),
             f"{row.get('price_per_hour', '-')} ({row.get('price_kind', '-')}, {row.get('price_date', '-')})"] for row in c.devices]
    p = c.projection
    priced = [(f"{row['role']} measured", row["cost_per_unit"]) for row in c.devices if row.get("cost_per_unit") is not None]
    priced += [(f"target {row['utilisation']:.0%}", row["cost_per_unit"]) for row in p.get("rows", [])]
    bars = svg.bar_chart("cost", "Cost per unit (USD)", priced, "USD") if priced else svg.empty(
        "cost", "Cost per unit (USD)", "no priced instance: pass --ref-instance/--target-instance")
    projected = (table(*projection_table(p)) if p.get("rows") else "")
    be = c.break_even
    return section("cost", "Effective cost", table(["role", "device", "instance", "cost", "$/h (kind, date)"], rows),
                   "<h3 id=\"projection\">Target by utilisation</h3>" if p else "", notes(projection_summary(p)) if p else "",
                   projected, f"<p>Break-even: {escape(str(be.get('status', '-')))}"
                   + (f" after {be['units']:,.0f} units" if be.get("units") else "") + "</p>",
                   f'<div class="plots">{bars}</div>', "<h3>Assumptions</h3>", notes(c.assumptions))


def _resume_exit(r: CheckReport) -> str:
    res, ex = r.resume, r.exit
    curves = {"uninterrupted": res.uninterrupted, "resumed": res.resumed}
    gap = coincide(curves)
    resume_plot = (svg.line_chart("resume", "Resumed vs uninterrupted loss", curves, "step after resume", "loss")
                   if gap is None else f"<p>The resumed and uninterrupted losses coincide over {len(res.resumed)} steps "
                                       f"(largest gap {gap:.3g}), so no chart is drawn.</p>")
    rows = [[f.name, "yes" if f.loads_plain else "no", ", ".join(f.location_tags) or "-",
             ("pass" if f.parity.passed else "FAIL") if f.parity else "-", f.error or "",
             f.fix or (f"not reloaded: {f.skipped}" if f.skipped else "")] for f in ex.formats]
    return "\n".join([
        section("resume", "Checkpoint resume", f"<p>Status <strong>{escape(res.status)}</strong>; saved after step "
                f"{res.saved_at_step}; max |diff| {res.max_abs_diff}; exact {res.exact}.</p>", resume_plot, notes(res.notes)),
        section("exit", "Reversible exit", f"<p>Status <strong>{escape(ex.status)}</strong>; reloaded on {escape(ex.loader_device)}; "
                f"torchferry absent in the loading process: {ex.torchferry_absent}.</p>",
                table(["format", "loads plainly", "location tags", "parity", "error", "fix"], rows), notes(ex.notes)),
    ])


def _rehearsal(r: CheckReport) -> str:
    from torchferry.report.text import rehearsal_rows

    rh = r.rehearsal
    if rh.status == "not-run":
        return section("rehearsal", "Rehearsal", "<p>Not rehearsed.</p>", notes(rh.notes))
    new = [] if rh.signatures_step1 is None else [rh.signatures_step1, *rh.new_signatures]
    if new and not any(new[1:]):
        plot = (f"<p>Eager op signatures (one NEFF compilation each, cold): {new[0]} in step 1, none new in "
                f"{'the ' + str(len(new) - 1) + ' steps after' if len(new) > 1 else 'a later step (one step run)'}.</p>")
    else:
        plot = '<div class="plots">' + svg.bar_chart(
            "eager-signatures", "New eager op signatures per step (one NEFF compilation each, cold)",
            [(f"step {i}", float(n)) for i, n in enumerate(new, 1)], "signatures") + "</div>"
    syncs = [sum(step.values()) for step in rh.host_syncs_per_step]
    if any(syncs):
        plot += '<div class="plots">' + svg.line_chart("host-syncs", "Host syncs per step (the host waits for the device)",
                                                       {"host syncs": [float(n) for n in syncs]}, "step", "syncs") + "</div>"
    fallbacks = table(["op", "calls", "share of calls", "share of device-op time here", "reason and source"],
                      [[f.op, str(f.calls), f"{f.share_of_calls:.2%}",
                        "-" if f.share_of_time is None else f"{f.share_of_time:.2%}", f.reason] for f in rh.fallbacks])
    known = table(["op", "calls", "kind", "the vendor's reason", "where its CI skips it", "source"],
                  [[k.op, str(k.calls), k.kind, k.reason, k.scope, k.source] for k in rh.known_issues])
    frames = table(["compiled frame", "graphs", "recompiles", "changing inputs"],
                   [[f.frame, str(f.graphs), str(f.recompiles), "; ".join(f.changing_inputs) or "-"]
                    for f in rh.compile.frames]) if rh.compile and rh.compile.frames else ""
    return section("rehearsal", f"Rehearsal of {rh.emulates}",
                   f"<p>Status <strong>{escape(rh.status)}</strong>: what this emulation predicts about {escape(rh.emulates)} "
                   "(ops, compilations, numerics, memory, placement). Its times are this host's, not the target's.</p>",
                   table(["", ""], [list(row) for row in rehearsal_rows(rh)]),
                   "<h3>Conditions</h3>" + (notes(rh.conditions) or "<p>The rehearsal predicts no condition of its own"
                                            + ("; the verdict's conditions come from other results (Next actions)"
                                               if r.verdict != "go" else "") + ".</p>"),
                   "<h3>Predicted host fallbacks</h3>" + (fallbacks if rh.fallbacks else "<p>None predicted.</p>"),
                   "<h3>Known issues (the vendor's own CI skips these ops)</h3>"
                   + (known if rh.known_issues else "<p>None run.</p>"), frames,
                   plot, notes([rh.numerics.note, *rh.notes] if rh.numerics.note else rh.notes))


def _next_actions(r: CheckReport) -> str:
    """Every condition and failure with its fix, as one list, right under the verdict."""
    if r.next_actions:
        items = "".join(f"<li><strong>{escape(a.result)}</strong>: {escape(a.action)}</li>" for a in r.next_actions)
        return section("next-actions", "Next actions", f"<ol>{items}</ol>")
    return section("next-actions", "Next actions", "<p>None: every result is go.</p>" if r.verdict == "go" else
                   f"<p>None listed: the verdict is {escape(r.verdict)} (see the verdict per result).</p>")


def _options(cfg: dict) -> list[tuple[str, object]]:
    """The configuration as (option, value) rows: the common fields, then the source's own."""
    source = cfg.get("source", {})
    return [(k, v) for k, v in cfg.items() if k != "source"] + [(f"source.{k}", v) for k, v in source.items()]


def render(report: CheckReport) -> str:
    """Verdict, next actions, the result that decides (the rehearsal for an emulated target, the time for a real
    one), the verdict per result, then the details."""
    cfg = report.config
    verdicts = table(["result", "verdict", "reason"], [[v.result, v.verdict, v.reason] for v in report.verdicts])
    f = report.failure
    failure = (f'<p class="no-go" id="failure">{"Target failed" if f.finding else "Stopped"} ({escape(f.kind)}'
               f'{", during " + escape(f.phase) if f.phase else ""}): {escape(f.message)}</p>') if f else ""
    env_rows = [[k, str(v)] for k, v in report.environment.items()] + [["format_version", str(report.meta.format_version)]]
    t = report.timing
    emulated = bool(report.rehearsal.emulates) or bool(t.target and t.target.emulates)
    deciding, other = (_rehearsal(report), _timing(report)) if emulated else (_timing(report), _rehearsal(report))
    body = "\n".join([
        failure, _next_actions(report), deciding, section("verdicts", "Verdict per result", verdicts),
        _parity(report), other, _resume_exit(report), _cost(report),
        section("environment", "Environment and configuration", table(["", ""], env_rows),
                table(["option", "value"], [[k, str(v)] for k, v in _options(cfg)])),
    ])
    title = report.subject
    decision = f": {escape(report.decision)}" if report.decision else ""
    verdict = (f'<p class="verdict {escape(report.verdict)}" id="verdict"><strong>Verdict: {escape(report.verdict)}'
               f'</strong>{decision}</p>')
    return page("check", title, verdict + "\n" + body, style=STYLE)
