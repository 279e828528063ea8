"""Terminal and HTML renderings of the coverage result model (JSON: torchferry.report.jsonreport).

The HTML page is self-contained: inline CSS, inline SVG charts (torchferry.report.svg) and a
few lines of inline script that sort the table when a header is clicked; nothing is fetched.
"""

from __future__ import annotations

from html import escape

from torchferry.report import svg
from torchferry.report.coverage import CATEGORIES, Category, CoverageReport, Mark
from torchferry.report.page import page


def _pct(share: float | None, part: int, whole: int) -> str:
    return f"{share:.0f}% ({part}/{whole})" if share is not None else "-"


def prediction_note(doc: CoverageReport) -> str:
    """Where the fallback, signature and sync figures come from: never host figures passed off as the target's."""
    profiles = sorted({r.profile for r in doc.rows if r.profile})
    if not profiles:
        return ""
    return (f"host fallbacks, eager signatures and host syncs are predictions of the built-in device's "
            f"{', '.join(profiles)} profile (a host rehearsal), not measurements on the real device")


def shards_line(sh: dict) -> str:
    """What a merged report holds: its shards, those missing, the cases no store had."""
    return (f"merged shards {', '.join(map(str, sh['merged']))} of {sh['count']} from {len(sh['stores'])} stores"
            + (f"; MISSING shards {', '.join(map(str, sh['missing']))}" if sh["missing"] else "")
            + (f"; {sh['unassigned']} cases in no store" if sh["unassigned"] else ""))


def table_lines(doc: CoverageReport) -> list[str]:
    """The cross-suite table: suite x mode, pass share, predicted-fallback-free share, fullgraph share."""
    lines = [f"{'suite':<10} {'mode':<9} {'pass':<16} {'fallback-free':<16} fullgraph"]
    for t in doc.summary["table"]:
        lines.append(f"{t['suite']:<10} {t['mode']:<9} {_pct(t['pass_share'], t['pass'], t['measured']):<16} "
                     f"{_pct(t['fallback_free_share'], t['fallback_free'], t['predicted']):<16} "
                     f"{_pct(t['fullgraph_share'], t['fullgraph'], t['compiled'])}")
    return lines


def _ranking(title: str, entries: list[dict], limit: int) -> list[str]:
    if not entries:
        return []
    lines = [title]
    for e in entries[:limit]:
        names = ", ".join(a.split("/", 1)[1] for a in e["archs"][:4]) + (", ..." if e["architectures"] > 4 else "")
        lines.append(f"  {e['name'][:100]:<40} {e['architectures']:>3} architectures, {e['calls']} calls ({names})")
    return lines


def method_line(config: dict) -> str:
    """The method and, when the config has them, its settings and the file they were taken from."""
    ms = config.get("method_settings")
    if not ms:
        return f"method: {config['method']}"
    keys = ("widths", "depth", "dtype", "dropout", "attention", "batch", "seq", "loss", "optimizer_steps", "remote_code")
    return (f"method: {ms['name']} ({', '.join(f'{k} {ms[k]}' for k in keys if k in ms)}); "
            f"settings from {ms.get('source') or 'torchferry'}")


def render_text(doc: CoverageReport) -> str:
    modes = doc.config["modes"]
    suites: dict[str, dict[str, dict]] = {}
    for r in doc.rows:
        suites.setdefault(r.suite, {}).setdefault(r.arch, {})[r.mode] = r
    width = max([len(a) for archs in suites.values() for a in archs] + [12])
    lines = []
    for suite, archs in suites.items():
        lines.append(f"{suite:<{width}}  " + "  ".join(f"{m:<14}" for m in modes))
        for arch, by_mode in archs.items():
            cells = []
            for m in modes:
                r = by_mode.get(m)
                mark = f" ({r.baseline})" if r and r.baseline not in (None, Mark.UNCHANGED) else ""
                cells.append(f"{(r.category + mark) if r else '-':<14}")
            lines.append(f"{arch:<{width}}  " + "  ".join(cells))
        lines.append("")
    counts = doc.summary["categories"]
    lines.append("categories: " + ", ".join(f"{c} {counts[c]}" for c in CATEGORIES if counts.get(c)))
    failures = [r for r in doc.rows if r.category != Category.PASS]
    if failures:
        lines.append("not passing:")
        lines += [f"  {r.suite}/{r.arch}/{r.mode}: {r.category}: {r.reason[:160]}" for r in failures[:60]]
        if len(failures) > 60:
            lines.append(f"  ... {len(failures) - 60} more in coverage.json")
    lines.append("")
    lines += table_lines(doc)
    note = prediction_note(doc)
    if note:
        lines.append(note)
    lines += _ranking("host-fallback ops blocking the most architectures (predicted by the device profile):",
                      doc.summary["blocking_ops"], 10)
    lines += _ranking("graph breaks blocking the most architectures:", doc.summary["blocking_breaks"], 5)
    if doc.baseline:
        b = doc.baseline
        lines.append(f"baseline {b['file']}: " + ", ".join(f"{k} {v}" for k, v in b["counts"].items()))
        lines += [f"  REGRESSED {k}" for k in b["regressed"]]
    lines.append("")
    if doc.failure:
        lines.append(f"stopped: {doc.failure.kind}: {doc.failure.message}; {len(doc.rows)} finished rows reported")
    if doc.shards:
        lines.append(shards_line(doc.shards))
    elif doc.config.get("shard"):
        lines.append(f"shard {doc.config['shard']}: {doc.config['architectures']} architectures of the selection; "
                     "combine the shards with `ferry coverage merge`")
    if doc.config.get("method"):
        lines.append(method_line(doc.config))
    lines += doc.headline
    if not doc.shards:
        lines.append(f"wall time {doc.meta.wall_s:.0f} s with {doc.config['jobs']} job(s)" + _phases(doc.summary.get("time")))
    return "\n".join(lines)


def _phases(time: dict[str, float] | None) -> str:
    """'; in workers: start 12 s, ...' (where the rows' time went), or '' when the rows carry no phases."""
    if not time:
        return ""
    names = {"start": "process start", "setup": "imports and devices", "build": "model builds",
             "first_call": "first target calls", "modes": "the rest of the modes"}
    shown = ", ".join(f"{label} {time[key]:.1f} s" for key, label in names.items())
    compiled = f" (compile {time['compile']:.1f} s)" if time.get("compile") else ""
    return f"; in workers: {shown}{compiled}"



STYLE = """body{max-width:1280px}
table{margin:0} td,th{padding:2px 6px;font-size:12px;vertical-align:top}
th{cursor:pointer;background:#f4f4f4} .pass{color:#1a7f37} .skipped{color:#777} .fail{color:#cf222e}"""

BODY = """<ul id="headline">{headline}</ul>
<p>{method}.</p>
{stopped}<p>Wall time {wall:.0f} s with {jobs} job(s). Exclusions (skipped rows) are out of the denominator: {excluded}.
Host-limited rows (this host's memory or time; no verdict on the device) are out of it too: {host_limited}.</p>
<div class="plots">{plots}</div>
<h2>Suites</h2>
<table id="suites"><thead><tr><th>suite</th><th>mode</th><th>pass</th><th>predicted-fallback-free</th><th>fullgraph</th></tr></thead>
<tbody>{suites}</tbody></table>
<p>{note}</p>
{rankings}
{baseline}
{tables}
"""

# Click a column header to sort its table (numbers as numbers).
SORT_SCRIPT = """document.querySelectorAll("table.rows").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], asc = th.dataset.asc !== "1";
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[i].textContent, y = b.cells[i].textContent, nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
      th.dataset.asc = asc ? "1" : "0";
    });
  });
});
"""


def render_html(doc: CoverageReport) -> str:
    summary = doc.summary
    several = len(summary["suites"]) > 1
    share = [(f"{t['suite']} {t['mode']}" if several else t["mode"], t["pass_share"] or 0.0) for t in summary["table"]]
    for suite, ss in summary["suites"].items():
        a = ss["all_modes"]
        if sum(1 for m in ss["modes"].values() if m["rows"]) > 1 and a["measured"]:
            share.append((f"{suite} all modes" if several else "all modes", 100.0 * a["pass"] / a["measured"]))
    counts = summary["categories"]
    plots = [svg.bar_chart("pass-share", "Pass share per suite and mode (% of measured)", share, "% pass"),
             svg.bar_chart("categories", "Rows per category", [(c, float(counts[c])) for c in CATEGORIES if counts.get(c)],
                           "rows")]
    header = ["architecture", "mode", "category", "reason", "class", "wall s", "fallback share", "eager signatures",
              "host syncs", "known issues", "graphs", "graph breaks", "fullgraph"] + (["baseline"] if doc.baseline else [])
    bodies: dict[str, list[str]] = {}
    for r in doc.rows:
        cls = "pass" if r.category == Category.PASS else "skipped" if r.category == Category.SKIPPED else "fail"
        syncs = sum(r.host_syncs.values()) if r.host_syncs is not None else None
        breaks = "; ".join(f"{b['reason']} @ {b['where']}" for b in r.break_reasons or [])
        cells = [r.arch, r.mode, r.category, r.reason, r.model_class or "", f"{r.wall_s:.1f}",
                 f"{100 * r.fallback_share:.2f}%" if r.fallback_share is not None else "", _blank(r.eager_signatures),
                 _blank(syncs), ", ".join(f"{k['op']} ({k['kind']})" for k in r.known_issues or []), _blank(r.graphs), f"{r.graph_breaks}: {breaks}" if r.graph_breaks else _blank(r.graph_breaks),
                 _blank(r.fullgraph)]
        if doc.baseline:
            cells.append(r.baseline or "")
        bodies.setdefault(r.suite, []).append(f'<tr class="{cls}">' + "".join(f"<td>{escape(str(c))}</td>" for c in cells)
                                              + "</tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    tables = "\n".join(f'<h2>Rows: {escape(suite)}</h2>\n<table class="rows" data-suite="{escape(suite)}"><thead><tr>{head}'
                       f'</tr></thead><tbody>{"".join(body)}</tbody></table>' for suite, body in bodies.items())
    suites = "".join(
        f"<tr><td>{escape(t['suite'])}</td><td>{escape(t['mode'])}</td><td>{_pct(t['pass_share'], t['pass'], t['measured'])}</td>"
        f"<td>{_pct(t['fallback_free_share'], t['fallback_free'], t['predicted'])}</td>"
        f"<td>{_pct(t['fullgraph_share'], t['fullgraph'], t['compiled'])}</td></tr>" for t in summary["table"])
    rankings = "".join(_ranking_html(title, summary[key]) for key, title in (
        ("blocking_ops", "Host-fallback ops blocking the most architectures"),
        ("blocking_breaks", "Graph breaks blocking the most architectures")))
    baseline = ""
    if doc.baseline:
        b = doc.baseline
        baseline = (f"<h2>Baseline</h2><p>{escape(b['file'])}: " + escape(", ".join(f"{k} {v}" for k, v in b["counts"].items()))
                    + "</p>" + ("<p>Regressed: " + escape(", ".join(b["regressed"])) + "</p>" if b["regressed"] else ""))
    excluded = sorted({f"{suite}/{a}" if several else a for suite, ss in summary["suites"].items()
                       for m in ss["modes"].values() for a in m["excluded"]})
    host_limited = sorted({f"{suite}/{a}" if several else a for suite, ss in summary["suites"].items()
                           for m in ss["modes"].values() for a in m.get("host_limited", ())})
    stopped = (f'<p id="failure" class="fail">Stopped ({escape(doc.failure.kind)}): {escape(doc.failure.message)}; '
               f"{len(doc.rows)} finished rows below.</p>") if doc.failure else ""
    if doc.shards:
        stopped += f'<p id="shards" class="{"fail" if doc.shards["missing"] else ""}">{escape(shards_line(doc.shards))}.</p>'
    body = BODY.format(headline="".join(f"<li>{escape(h)}</li>" for h in doc.headline),
                       wall=doc.meta.wall_s or 0.0, jobs=doc.config["jobs"], excluded=escape(", ".join(excluded) or "none"),
                       host_limited=escape(", ".join(host_limited) or "none"),
                       plots="\n".join(plots), baseline=baseline, tables=tables, stopped=stopped, suites=suites, rankings=rankings,
                       note=escape(prediction_note(doc)), method=escape(method_line({**doc.config, "method": doc.config.get("method") or "torchferry"})))
    return page("coverage", doc.config["target"], body, style=STYLE, script=SORT_SCRIPT)


def _blank(value: object) -> object:
    return "" if value is None else value


def _ranking_html(title: str, entries: list[dict]) -> str:
    if not entries:
        return ""
    rows = "".join(f"<tr><td>{escape(e['name'])}</td><td>{e['architectures']}</td><td>{e['rows']}</td><td>{e['calls']}</td>"
                   f"<td>{escape(', '.join(e['archs']))}</td></tr>" for e in entries)
    return (f"<h2>{escape(title)}</h2><table><thead><tr><th>op / reason</th><th>architectures</th><th>rows</th>"
            f"<th>calls</th><th>which</th></tr></thead><tbody>{rows}</tbody></table>")
