"""The coverage result model: row categories, the headline, and the baseline comparison.

``FORMAT_VERSION`` is the schema version of ``coverage.json`` and of baseline files; bump it
with a line below on every incompatible change.

- 1: first version (meta, environment, config, headline, summary, rows, baseline).
"""

from __future__ import annotations

import traceback
from collections import Counter
from typing import Any

FORMAT_VERSION = 1

PASS, FAIL_PARITY, FAIL_FALLBACK, FAIL_COMPILE, FAIL_RECOMPILE = (
    "pass", "fail-parity", "fail-fallback", "fail-compile", "fail-recompile")
ERROR, TIMEOUT, OOM, SKIPPED = "error", "timeout", "oom", "skipped"
CATEGORIES = (PASS, FAIL_PARITY, FAIL_FALLBACK, FAIL_COMPILE, FAIL_RECOMPILE, ERROR, TIMEOUT, OOM, SKIPPED)
MODES = ("forward", "generate", "train")
UNCHANGED, FIXED, REGRESSED, NEW = "unchanged", "fixed", "regressed", "new"


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


def key(row: dict) -> str:
    return f"{row['arch']}/{row['mode']}"


def summarise(rows: list[dict], modes: list[str]) -> dict:
    """Per-mode and all-modes pass counts with their denominators; skipped rows are exclusions."""
    by_mode: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        measured = [r for r in mine if r["category"] != SKIPPED]
        by_mode[mode] = {
            "pass": sum(r["category"] == PASS for r in measured), "measured": len(measured), "rows": len(mine),
            "excluded": sorted(r["arch"] for r in mine if r["category"] == SKIPPED),
            "categories": dict(Counter(r["category"] for r in mine)),
        }
    archs: dict[str, dict[str, str]] = {}
    for r in rows:
        archs.setdefault(r["arch"], {})[r["mode"]] = r["category"]
    complete = {a: c for a, c in archs.items() if all(m in c for m in modes)}
    measured_all = {a: c for a, c in complete.items() if SKIPPED not in c.values()}
    return {
        "modes": by_mode,
        "all_modes": {
            "pass": sum(all(v == PASS for v in c.values()) for c in measured_all.values()),
            "measured": len(measured_all), "architectures": len(archs), "complete": len(complete),
            "excluded": sorted(a for a, c in complete.items() if SKIPPED in c.values()),
        },
        "categories": dict(Counter(r["category"] for r in rows)),
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


def compare_baseline(rows: list[dict], baseline: dict) -> dict:
    """Mark each row unchanged / fixed / regressed / new against the expected categories."""
    expected = baseline.get("rows", {})
    marks: dict[str, dict] = {}
    for r in rows:
        k = key(r)
        was = expected.get(k)
        if was is None:
            mark = NEW
        elif was == PASS and r["category"] != PASS:
            mark = REGRESSED
        elif was != PASS and r["category"] == PASS:
            mark = FIXED
        else:
            mark = UNCHANGED
        marks[k] = {"mark": mark, "expected": was, "actual": r["category"]}
        r["baseline"] = mark
    counts = Counter(m["mark"] for m in marks.values())
    return {"counts": {m: counts.get(m, 0) for m in (UNCHANGED, FIXED, REGRESSED, NEW)},
            "regressed": sorted(k for k, m in marks.items() if m["mark"] == REGRESSED),
            "fixed": sorted(k for k, m in marks.items() if m["mark"] == FIXED),
            "missing": sorted(set(expected) - set(marks))}


def baseline_from(rows: list[dict], device: str, config: dict, versions: dict) -> dict:
    return {"format_version": FORMAT_VERSION, "device": device, "compile": config.get("compile"),
            "modes": config.get("modes"), "versions": versions,
            "note": "expected category per architecture/mode; regenerate with `ferry coverage --write-baseline FILE`",
            "rows": {key(r): r["category"] for r in sorted(rows, key=key)}}
