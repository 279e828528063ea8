"""Terminal and HTML renderings of the coverage result model (JSON: torchferry.report.jsonreport).

The HTML page is self-contained: inline CSS, inline SVG charts (torchferry.report.svg) and a
few lines of inline script that sort the table when a header is clicked; nothing is fetched.
"""

from __future__ import annotations

from html import escape

from torchferry.report import svg
from torchferry.report.coverage import CATEGORIES, Category, CoverageReport, Mark


def render_text(doc: CoverageReport) -> str:
    modes = doc.config["modes"]
    archs: dict[str, dict] = {}
    for r in doc.rows:
        archs.setdefault(r.arch, {})[r.mode] = r
    width = max([len(a) for a in archs] + [12])
    lines = [f"{'architecture':<{width}}  " + "  ".join(f"{m:<14}" for m in modes)]
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
        lines += [f"  {r.arch}/{r.mode}: {r.category}: {r.reason[:160]}" for r in failures[:60]]
        if len(failures) > 60:
            lines.append(f"  ... {len(failures) - 60} more in coverage.json")
    if doc.baseline:
        b = doc.baseline
        lines.append(f"baseline {b['file']}: " + ", ".join(f"{k} {v}" for k, v in b["counts"].items()))
        lines += [f"  REGRESSED {k}" for k in b["regressed"]]
    lines.append("")
    if doc.failure:
        lines.append(f"stopped: {doc.failure.kind}: {doc.failure.message}; {len(doc.rows)} finished rows reported")
    lines += doc.headline
    lines.append(f"wall time {doc.meta.wall_s:.0f} s with {doc.config['jobs']} job(s)")
    return "\n".join(lines)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>ferry coverage: {device}</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:1280px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:12px;vertical-align:top}}
th{{cursor:pointer;background:#f4f4f4}} .pass{{color:#1a7f37}} .skipped{{color:#777}} .fail{{color:#cf222e}}
.plots{{display:flex;flex-wrap:wrap;gap:12px}}
</style></head><body>
<h1>ferry coverage: {device}</h1>
<ul id="headline">{headline}</ul>
{stopped}<p>Wall time {wall:.0f} s with {jobs} job(s). Exclusions (skipped rows) are out of the denominator: {excluded}.</p>
<div class="plots">{plots}</div>
{baseline}
<h2>Rows</h2>
<table id="rows"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<script>
document.querySelectorAll("#rows th").forEach(function (th, i) {{
  th.addEventListener("click", function () {{
    var body = document.querySelector("#rows tbody"), asc = th.dataset.asc !== "1";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {{
      var x = a.cells[i].textContent, y = b.cells[i].textContent, nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    }});
    rows.forEach(function (r) {{ body.appendChild(r); }});
    th.dataset.asc = asc ? "1" : "0";
  }});
}});
</script>
</body></html>
"""


def render_html(doc: CoverageReport) -> str:
    summary = doc.summary
    share = [(m, 100.0 * s["pass"] / s["measured"] if s["measured"] else 0.0) for m, s in summary["modes"].items()]
    if len(summary["modes"]) > 1 and summary["all_modes"]["measured"]:
        a = summary["all_modes"]
        share.append(("all modes", 100.0 * a["pass"] / a["measured"]))
    counts = summary["categories"]
    plots = [svg.bar_chart("pass-share", "Pass share per mode (% of measured)", share, "% pass"),
             svg.bar_chart("categories", "Rows per category", [(c, float(counts[c])) for c in CATEGORIES if counts.get(c)],
                           "rows")]
    header = ["architecture", "mode", "category", "reason", "class", "wall s"] + (["baseline"] if doc.baseline else [])
    body = []
    for r in doc.rows:
        cls = "pass" if r.category == Category.PASS else "skipped" if r.category == Category.SKIPPED else "fail"
        cells = [r.arch, r.mode, r.category, r.reason, r.model_class or "", f"{r.wall_s:.1f}"]
        if doc.baseline:
            cells.append(r.baseline or "")
        body.append(f'<tr class="{cls}">' + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    baseline = ""
    if doc.baseline:
        b = doc.baseline
        baseline = (f"<h2>Baseline</h2><p>{escape(b['file'])}: " + escape(", ".join(f"{k} {v}" for k, v in b["counts"].items()))
                    + "</p>" + ("<p>Regressed: " + escape(", ".join(b["regressed"])) + "</p>" if b["regressed"] else ""))
    excluded = sorted({a for s in summary["modes"].values() for a in s["excluded"]})
    stopped = (f'<p id="failure" class="fail">Stopped ({escape(doc.failure.kind)}): {escape(doc.failure.message)}; '
               f"{len(doc.rows)} finished rows below.</p>") if doc.failure else ""
    return PAGE.format(device=escape(doc.config["target"]), headline="".join(f"<li>{escape(h)}</li>" for h in doc.headline),
                       wall=doc.meta.wall_s or 0.0, jobs=doc.config["jobs"], excluded=escape(", ".join(excluded) or "none"),
                       plots="\n".join(plots), baseline=baseline, head="".join(f"<th>{escape(h)}</th>" for h in header),
                       body="\n".join(body), stopped=stopped)
