"""Inline SVG plots (no JavaScript, no network): line charts and bar charts with axes and labels."""

from __future__ import annotations

import math
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 560, 260, 64, 16, 28, 40


def _ticks(lo: float, hi: float) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / 4 for i in range(5)]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _frame(kind: str, title: str, xlabel: str, ylabel: str, body: list[str], ylo: float, yhi: float) -> str:
    y = lambda v: PAD_T + (H - PAD_T - PAD_B) * (1 - (v - ylo) / ((yhi - ylo) or 1))  # noqa: E731
    parts = [f'<svg class="plot" data-plot="{escape(kind)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
             f'width="{W}" height="{H}" role="img" aria-label="{escape(title)}">',
             f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
             f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="#333"/>',
             f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#333"/>',
             f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle" font-size="11">{escape(xlabel)}</text>',
             f'<text x="12" y="{H / 2}" text-anchor="middle" font-size="11" transform="rotate(-90 12 {H / 2})">{escape(ylabel)}</text>']
    for t in _ticks(ylo, yhi):
        parts.append(f'<text x="{PAD_L - 4}" y="{y(t) + 4:.1f}" text-anchor="end" font-size="10">{_fmt(t)}</text>')
        parts.append(f'<line x1="{PAD_L}" y1="{y(t):.1f}" x2="{W - PAD_R}" y2="{y(t):.1f}" stroke="#eee"/>')
    return "\n".join(parts + body + ["</svg>"])


def line_chart(kind: str, title: str, series: dict[str, list[float]], xlabel: str, ylabel: str) -> str:
    """One polyline per series over its index (1-based), with a legend."""
    values = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    if not values:
        return empty(kind, title, "no data")
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - abs(lo) * 0.05 - 1e-12, hi + abs(hi) * 0.05 + 1e-12
    n = max(len(vs) for vs in series.values())
    x = lambda i: PAD_L + (W - PAD_L - PAD_R) * (i / max(n - 1, 1))  # noqa: E731
    y = lambda v: PAD_T + (H - PAD_T - PAD_B) * (1 - (v - lo) / (hi - lo))  # noqa: E731
    body = []
    for k, (name, vs) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vs) if v is not None and math.isfinite(v))
        dash = ' stroke-dasharray="5 3"' if k else ""
        body.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"{dash} points="{points}"/>')
        body.append(f'<text x="{W - PAD_R - 4}" y="{PAD_T + 12 + 13 * k}" text-anchor="end" font-size="11" '
                    f'fill="{colour}">{escape(name)}</text>')
    body.append(f'<text x="{PAD_L}" y="{H - PAD_B + 14}" font-size="10">1</text>')
    body.append(f'<text x="{W - PAD_R}" y="{H - PAD_B + 14}" text-anchor="end" font-size="10">{n}</text>')
    return _frame(kind, title, xlabel, ylabel, body, lo, hi)


def bar_chart(kind: str, title: str, bars: list[tuple[str, float]], ylabel: str, highlight: str | None = None) -> str:
    """Vertical bars from zero; ``highlight`` names the bar drawn in red (e.g. the first divergent module)."""
    bars = [(name, v) for name, v in bars if v is not None and math.isfinite(v)]
    if not bars:
        return empty(kind, title, "no data")
    hi = max(max(v for _, v in bars), 1e-30)
    slot = (W - PAD_L - PAD_R) / len(bars)
    body = []
    for i, (name, v) in enumerate(bars):
        height = (H - PAD_T - PAD_B) * v / hi
        colour = "#d62728" if name == highlight else COLOURS[0]
        xpos = PAD_L + i * slot + slot * 0.1
        body.append(f'<rect class="bar" data-label="{escape(name)}" x="{xpos:.1f}" y="{H - PAD_B - height:.1f}" '
                    f'width="{slot * 0.8:.1f}" height="{height:.1f}" fill="{colour}"><title>{escape(name)}: {_fmt(v)}</title></rect>')
        if len(bars) <= 12:
            body.append(f'<text x="{xpos + slot * 0.4:.1f}" y="{H - PAD_B + 12}" text-anchor="middle" font-size="9">'
                        f'{escape(name[-18:])}</text>')
    return _frame(kind, title, "", ylabel, body, 0.0, hi)


def empty(kind: str, title: str, why: str) -> str:
    return _frame(kind, title, "", "", [f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="12" fill="#777">'
                                        f'{escape(why)}</text>'], 0.0, 1.0)
