"""Renderers of `ferry plan`'s result model: the terminal table, versioned JSON, and an HTML page whose
section draws one stacked bar per layout (memory by category) against the capacity line."""

from __future__ import annotations

from html import escape

from torchferry.report.plan import CATEGORIES, GIB, LayoutResult, PlanReport
from torchferry.report import jsonreport, svg
from torchferry.report.core import FileReporter
from torchferry.report.htmlreport import notes, section, table
from torchferry.report.page import page


def gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def dollars(value: float) -> str:
    return f"${value:.3g}" if value < 1 else f"${value:,.2f}"


def _shape_line(model: dict) -> str:
    s = model["shape"]
    if not s:
        return f"{model['name']} (user workload {model['source']})"
    tied = ", tied embeddings" if s.get("tie_word_embeddings") else ""
    return (f"{model['name']}: hidden {s.get('hidden_size')}, {s.get('num_hidden_layers')} layers, "
            f"{s.get('num_attention_heads')} heads, {s.get('num_key_value_heads')} kv heads, MLP {s.get('intermediate_size')}, "
            f"vocab {s.get('vocab_size')}{tied} (source: {model['source']})")


SHORT = {"parameters": "params", "gradients": "grads", "optimizer state": "optim", "activations": "activ",
         "temporaries": "temp"}
HEADER = ["layout", "peak/core GiB", *(SHORT[c] for c in CATEGORIES), "memory", "step >=", "tokens/s <=", "$/1M tok >="]


def rows(report: PlanReport) -> list[list[str]]:
    out = []
    for r in report.layouts:
        b = r.bounds
        out.append([r.layout.label, gib(r.trace.peak_bytes), *(gib(r.trace.breakdown[c]) for c in CATEGORIES), r.verdict,
                    seconds(b.step_lower_s), f"{b.tokens_per_s_upper:,.0f}", dollars(b.cost_per_1m_tokens_lower)])
    return out


def sources(report: PlanReport) -> list[str]:
    t = report.target
    items = [f"capacity {gib(report.capacity['bytes'])} GiB per core: {report.capacity['source']}",
             f"{t.instance}: peak {t.dtype} {t.flops / 1e12:,.0f} TFLOP/s per accelerator ({t.accelerators} per instance)"
             + (f", HBM {t.hbm_bytes_per_s / 1e9:,.0f} GB/s" if t.hbm_bytes_per_s else "")
             + (f", link {t.link_bytes_per_s / 1e9:,.0f} GB/s" if t.link_bytes_per_s else "")
             + f" per accelerator; source: {t.sources['peaks']}",
             f"{t.instance} price: {t.sources['price']}" + (f" ({t.sources['price_note']})" if "price_note" in t.sources else ""),
             "memory: FSDPMemTracker (torch.distributed._tools) over one step on FakeTensor and the fake process group at "
             "the full world size, after the optimizer state exists; FLOPs: torch.utils.flop_counter formulas per rank",
             "step >= max(FLOPs / peak, ring-collective bytes / link bandwidth): a lower bound, not a forecast; cost at "
             "utilisation u = lower-bound cost / u"]
    if report.reference:
        r = report.reference
        items.append(f"reference {r.instance}: peak {r.dtype} {r.flops / 1e12:,.0f} TFLOP/s per accelerator; source: "
                     f"{r.sources['peaks']}; price: {r.sources['price']}")
    return items


def render_text(report: PlanReport, paths: list[str] | None = None) -> str:
    lines = [f"ferry plan: {_shape_line(report.model)}",
             f"target: {report.target.instance}, {report.layouts[0].layout.world if report.layouts else '?'} ranks, "
             f"{gib(report.capacity['bytes'])} GiB per logical core"]
    header, body = HEADER, rows(report)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    for row in (header, *body):
        lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    best = report.best
    if report.searched:
        lines.append(f"best: {best.layout.label} ({best.verdict}, step >= {seconds(best.bounds.step_lower_s)})" if best
                     else "best: none of the layouts fits; add checkpointing, more ranks or a smaller micro-batch")
    first = best or (report.layouts[0] if report.layouts else None)
    if first:
        b = first.bounds
        lines.append(f"{first.layout.label}: compute {seconds(b.compute_s)}, collectives {seconds(b.collective_s)} "
                     f"(limited by {b.limited_by}); HBM if unfused {seconds(b.hbm_unfused_s)}; micro-batch "
                     f"{first.layout.micro_batch} x {first.layout.seq_len} tokens, global batch {first.layout.global_batch}")
        lines.append("  $/1M tokens at utilisation " + ", ".join(f"{u} {dollars(c)}" for u, c in b.cost_at_utilisation.items()))
        if first.reference:
            r = first.reference
            lines.append(f"  reference {r.instance}: step >= {seconds(r.step_lower_s)} on one instance, tokens/s <= "
                         f"{r.tokens_per_s_upper:,.0f}, $/1M tokens >= {dollars(r.cost_per_1m_tokens_lower)}; at utilisation "
                         + ", ".join(f"{u} {dollars(c)}" for u, c in r.cost_at_utilisation.items()) + f" ({r.scope})")
    for v in report.validations:
        lines.append(f"validate {v.layout}: predicted {v.predicted_bytes / 2**20:.2f} MiB, measured on the built-in {v.device} device "
                     f"{', '.join(f'{m / 2**20:.2f}' for m in v.measured_bytes)} MiB per rank: error {v.error:+.2%} "
                     f"({'within' if v.passed else 'OUTSIDE'} {v.tolerance:.0%})")
    for note in report.skipped:
        lines.append(f"skipped: {note}")
    for note in report.notes:
        lines.append(f"note: {note}")
    lines += [f"source: {s}" for s in sources(report)]
    lines.append("figures are predictions from a traced step and the price table's peaks, not measurements of Trainium")
    if paths:
        lines.append(f"reports: {', '.join(paths)}")
    return "\n".join(lines)


def render_json(report: PlanReport) -> str:
    return jsonreport.render(report.to_dict())


def stacked_bars(results: list[LayoutResult], capacity: int) -> str:
    """One bar per layout, one segment per memory category, and the capacity as a dashed line."""
    if not results:
        return svg.empty("plan-memory", "Peak memory per core", "no layout traced")
    top = max([capacity, *(r.trace.peak_bytes for r in results)]) * 1.1 / GIB
    y = lambda v: svg.PAD_T + (svg.H - svg.PAD_T - svg.PAD_B) * (1 - v / top)  # noqa: E731
    slot = (svg.W - svg.PAD_L - svg.PAD_R) / len(results)
    body = []
    for i, r in enumerate(results):
        x, base = svg.PAD_L + i * slot + slot * 0.15, 0.0
        for k, category in enumerate(CATEGORIES):
            value = r.trace.breakdown[category] / GIB
            body.append(f'<rect class="segment" data-layout="{escape(r.layout.label)}" data-category="{escape(category)}" '
                        f'x="{x:.1f}" y="{y(base + value):.1f}" width="{slot * 0.7:.1f}" height="{y(base) - y(base + value):.1f}" '
                        f'fill="{svg.COLOURS[k % len(svg.COLOURS)]}"><title>{escape(r.layout.label)}: {escape(category)} '
                        f'{value:.2f} GiB</title></rect>')
            base += value
        body.append(f'<text x="{x + slot * 0.35:.1f}" y="{svg.H - svg.PAD_B + 12}" text-anchor="middle" font-size="9">'
                    f'{escape(r.layout.label.replace("FSDP ", "").replace(" x TP ", "x").replace(", AC", " AC"))}</text>')
    cap = capacity / GIB
    body.append(f'<line class="capacity" x1="{svg.PAD_L}" y1="{y(cap):.1f}" x2="{svg.W - svg.PAD_R}" y2="{y(cap):.1f}" '
                f'stroke="#cf222e" stroke-dasharray="6 3" stroke-width="2"/>')
    body.append(f'<text x="{svg.W - svg.PAD_R - 4}" y="{y(cap) - 4:.1f}" text-anchor="end" font-size="11" fill="#cf222e">'
                f'capacity {cap:.1f} GiB</text>')
    for k, category in enumerate(CATEGORIES):
        body.append(f'<text x="{svg.PAD_L + 6 + 95 * k}" y="{svg.PAD_T + 10}" font-size="10" '
                    f'fill="{svg.COLOURS[k % len(svg.COLOURS)]}">{escape(category)}</text>')
    return svg._frame("plan-memory", "Peak memory per core by category", "", "GiB", body, 0.0, top)




def plan_section(report: PlanReport) -> str:
    """The plan as one HTML section (a page of its own, or part of another report)."""
    parts = [f"<p>{escape(_shape_line(report.model))}</p>", stacked_bars(report.layouts, report.capacity["bytes"]),
             table(HEADER, rows(report))]
    if report.validations:
        parts.append(table(["layout", "predicted MiB", "measured on the built-in device, MiB per rank", "error", "within tolerance"],
                           [[v.layout, f"{v.predicted_bytes / 2**20:.2f}", ", ".join(f"{m / 2**20:.2f}" for m in v.measured_bytes),
                             f"{v.error:+.2%}", f"{'yes' if v.passed else 'NO'} (±{v.tolerance:.0%})"] for v in report.validations]))
    parts += ["<h3>Sources and assumptions</h3>", notes(sources(report) + report.skipped + report.notes)]
    return section("plan", f"Memory and time bounds on {report.target.instance}", *parts)


def render_html(report: PlanReport) -> str:
    return page("plan", report.model["name"], plan_section(report))


REPORTERS = (FileReporter("plan.json", render_json), FileReporter("plan.html", render_html))
