"""Coverage figures from rows: the summary, the headline, and the baseline comparison.

The result model itself (rows, categories, the report) is torchferry.report.coverage.
"""

from __future__ import annotations

import traceback
from collections import Counter
from typing import Any

from torchferry.report.coverage import BASELINE_VERSION, CATEGORIES, Category, Mark, Row

__all__ = ["CATEGORIES", "Category", "baseline_from", "compare_baseline", "error_signature", "headline", "summarise"]


def error_signature(exc: BaseException) -> str:
    """``Type: first line of the message @ file:function``, the innermost frame: one line to group errors by."""
    message = (str(exc).strip().splitlines() or [""])[0][:240]
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        f = frames[-1]
        path = f.filename.replace("\\", "/")
        for marker in ("site-packages/", "torchferry/", "lib/python"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        where = f" @ {path}:{f.name}"
    return f"{type(exc).__name__}: {message}{where}"


def summarise(rows: list[Row], modes: list[str]) -> dict:
    """Per-mode and all-modes pass counts with their denominators; skipped rows are exclusions."""
    by_mode: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in rows if r.mode == mode]
        measured = [r for r in mine if r.category != Category.SKIPPED]
        by_mode[mode] = {
            "pass": sum(r.category == Category.PASS for r in measured), "measured": len(measured), "rows": len(mine),
            "excluded": sorted(r.arch for r in mine if r.category == Category.SKIPPED),
            "categories": {str(c): n for c, n in Counter(r.category for r in mine).items()},
        }
    archs: dict[str, dict[str, Category]] = {}
    for r in rows:
        archs.setdefault(r.arch, {})[r.mode] = r.category
    complete = {a: c for a, c in archs.items() if all(m in c for m in modes)}
    measured_all = {a: c for a, c in complete.items() if Category.SKIPPED not in c.values()}
    return {
        "modes": by_mode,
        "all_modes": {
            "pass": sum(all(v == Category.PASS for v in c.values()) for c in measured_all.values()),
            "measured": len(measured_all), "architectures": len(archs), "complete": len(complete),
            "excluded": sorted(a for a, c in complete.items() if Category.SKIPPED in c.values()),
        },
        "categories": {str(c): n for c, n in Counter(r.category for r in rows).items()},
    }


def headline(summary: dict, device: str, compiled: str | None, versions: dict) -> list[str]:
    """"N of M architectures pass on DEVICE (mode)", one line per mode, then all modes, exclusions and versions."""
    how = f"compile={compiled}" if compiled else "eager"
    lines = []
    for mode, s in summary["modes"].items():
        share = f" ({100 * s['pass'] / s['measured']:.0f}%)" if s["measured"] else ""
        lines.append(f"{s['pass']} of {s['measured']} architectures pass on {device} ({mode}, {how}){share}; "
                     f"{len(s['excluded'])} excluded (skipped)")
    a = summary["all_modes"]
    if len(summary["modes"]) > 1:
        share = f" ({100 * a['pass'] / a['measured']:.0f}%)" if a["measured"] else ""
        lines.append(f"{a['pass']} of {a['measured']} architectures pass on {device} (all modes: "
                     f"{', '.join(summary['modes'])}; {how}){share}; {len(a['excluded'])} excluded")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return lines


def compare_baseline(rows: list[Row], baseline: dict) -> dict:
    """Mark each row unchanged / fixed / regressed / new against the expected categories."""
    expected = baseline.get("rows", {})
    marks: dict[str, Mark] = {}
    for r in rows:
        was = expected.get(r.key)
        if was is None:
            mark = Mark.NEW
        elif was == Category.PASS and r.category != Category.PASS:
            mark = Mark.REGRESSED
        elif was != Category.PASS and r.category == Category.PASS:
            mark = Mark.FIXED
        else:
            mark = Mark.UNCHANGED
        marks[r.key] = r.baseline = mark
    counts = Counter(marks.values())
    return {"counts": {str(m): counts.get(m, 0) for m in Mark},
            "regressed": sorted(k for k, m in marks.items() if m == Mark.REGRESSED),
            "fixed": sorted(k for k, m in marks.items() if m == Mark.FIXED),
            "missing": sorted(set(expected) - set(marks))}


def baseline_from(rows: list[Row], device: str, config: dict, versions: dict) -> dict:
    return {"format_version": BASELINE_VERSION, "device": device, "compile": config.get("compile"),
            "modes": config.get("modes"), "versions": versions,
            "note": "expected category per architecture/mode; regenerate with `ferry coverage --write-baseline FILE`",
            "rows": {r.key: str(r.category) for r in sorted(rows, key=lambda r: r.key)}}
