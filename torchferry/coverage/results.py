"""Coverage figures from rows: the summary, the headline, and the baseline comparison.

The result model itself (rows, categories, the report) is torchferry.report.coverage.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections import Counter
from typing import Any

from torchferry.harness.window import short_path
from torchferry.report.coverage import (
    BASELINE_VERSION,
    CATEGORIES,
    DEFAULT_SUITE,
    OUTCOME_OF,
    OUTCOME_ORDER,
    UNMEASURED,
    Category,
    Mark,
    Outcome,
    Row,
)

TOP_OPS = 3  # host-fallback ops the headline names for each count

__all__ = ["CATEGORIES", "Category", "baseline_from", "blocking_breaks", "blocking_ops", "compare_baseline", "error_signature",
           "expected_rows", "headline", "ordered", "short_path", "suites_of", "summarise"]


def error_signature(exc: BaseException) -> str:
    """``Type: first line of the message @ file:function``, the innermost frame: one line to group errors by."""
    message = (str(exc).strip().splitlines() or [""])[0][:240]
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" @ {short_path(frames[-1].filename)}:{frames[-1].name}" if frames else ""
    return f"{type(exc).__name__}: {message}{where}"


def suites_of(rows: list[Row]) -> list[str]:
    """The suites of ``rows`` in first-seen order."""
    return list(dict.fromkeys(r.suite for r in rows))


def ordered(rows: list[Row], modes: list[str]) -> list[Row]:
    """Rows by suite, architecture, then mode in ``modes`` order: the same order for a sweep and a merge."""
    return sorted(rows, key=lambda r: (r.suite, r.arch, modes.index(r.mode) if r.mode in modes else len(modes)))


def _share(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def _suite_summary(rows: list[Row], modes: list[str]) -> dict:
    """Per-mode and all-modes pass counts with their denominators, and the prediction counts behind the
    cross-suite table. Skipped rows are exclusions and host-limited rows (this host's memory or time)
    are counted apart: neither is a verdict on the target, so neither is in a denominator."""
    by_mode: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in rows if r.mode == mode]
        measured = [r for r in mine if r.category not in UNMEASURED]
        predicted = [r for r in measured if r.op_calls is not None]
        compiled = [r for r in measured if r.fullgraph is not None]
        by_mode[mode] = {
            **_outcomes({r.arch: OUTCOME_OF[r.category] for r in mine}, mine),
            "pass": sum(r.category == Category.PASS for r in measured), "measured": len(measured), "rows": len(mine),
            "excluded": sorted(r.arch for r in mine if r.category == Category.SKIPPED),
            "host_limited": sorted(r.arch for r in mine if r.category == Category.HOST_LIMIT),
            "categories": {str(c): n for c, n in Counter(r.category for r in mine).items()},
            "predicted": len(predicted), "fallback_free": sum(not r.fallback_ops for r in predicted),
            "compiled": len(compiled), "fullgraph": sum(bool(r.fullgraph) for r in compiled),
        }
    archs: dict[str, dict[str, Category]] = {}
    for r in rows:
        archs.setdefault(r.arch, {})[r.mode] = r.category
    complete = {a: c for a, c in archs.items() if all(m in c for m in modes)}
    measured_all = {a: c for a, c in complete.items() if not set(c.values()) & set(UNMEASURED)}
    worst = {a: min((OUTCOME_OF[c] for c in cats.values()), key=OUTCOME_ORDER.index) for a, cats in complete.items()}
    return {
        "modes": by_mode,
        "all_modes": {
            **_outcomes(worst, [r for r in rows if r.arch in complete]),
            "pass": sum(all(v == Category.PASS for v in c.values()) for c in measured_all.values()),
            "measured": len(measured_all), "architectures": len(archs), "complete": len(complete),
            "excluded": sorted(a for a, c in complete.items() if Category.SKIPPED in c.values()),
            "host_limited": sorted(a for a, c in complete.items()
                                   if Category.HOST_LIMIT in c.values() and Category.SKIPPED not in c.values()),
        },
    }


def _outcomes(by_arch: dict[str, Outcome], rows: list[Row]) -> dict:
    """Architectures per outcome, and the host-fallback ops of those that work only with them, ranked."""
    fallbacks = [r for r in rows if by_arch.get(r.arch) == Outcome.HOST_FALLBACKS]
    return {"outcomes": {str(o): sum(v == o for v in by_arch.values()) for o in reversed(OUTCOME_ORDER)},
            "host_fallback_ops": [{"op": e["name"], "architectures": e["architectures"]}
                                  for e in blocking_ops(fallbacks)[:TOP_OPS]]}


def _ranked(found: dict[str, dict]) -> list[dict]:
    """Entries blocking the most architectures first, then the most calls."""
    out = [{"architectures": len(v["archs"]), **v, "archs": sorted(v["archs"])} for v in found.values()]
    return sorted(out, key=lambda e: (-e["architectures"], -e["calls"], e["name"]))


def blocking_ops(rows: list[Row]) -> list[dict]:
    """Host-fallback ops by how many architectures (``suite/arch``) they block: what a backend
    team would implement first."""
    found: dict[str, dict] = {}
    for r in rows:
        for op, n in r.fallback_ops.items():
            e = found.setdefault(op, {"name": op, "archs": set(), "rows": 0, "calls": 0})
            e["archs"].add(f"{r.suite}/{r.arch}")
            e["rows"] += 1
            e["calls"] += n
    return _ranked(found)


def blocking_breaks(rows: list[Row]) -> list[dict]:
    """Graph-break reasons by how many architectures they keep from compiling as one graph."""
    found: dict[str, dict] = {}
    for r in rows:
        for b in r.break_reasons or []:
            e = found.setdefault(b["reason"], {"name": b["reason"], "archs": set(), "rows": 0, "calls": 0,
                                               "where": b["where"]})
            e["archs"].add(f"{r.suite}/{r.arch}")
            e["rows"] += 1
            e["calls"] += b["count"]
    return _ranked(found)


def summarise(rows: list[Row], modes: list[str]) -> dict:
    """Everything the reports show besides the rows: per-suite counts, the cross-suite table
    (suite x mode: pass share, predicted-fallback-free share, fullgraph share), the rankings."""
    suites = {s: _suite_summary([r for r in rows if r.suite == s], modes) for s in suites_of(rows)}
    table = []
    for suite, s in suites.items():
        for mode, m in s["modes"].items():
            if m["rows"]:
                table.append({"suite": suite, "mode": mode, "measured": m["measured"], "pass": m["pass"],
                              "pass_share": _share(m["pass"], m["measured"]), "predicted": m["predicted"],
                              "fallback_free": m["fallback_free"],
                              "fallback_free_share": _share(m["fallback_free"], m["predicted"]),
                              "compiled": m["compiled"], "fullgraph": m["fullgraph"],
                              "fullgraph_share": _share(m["fullgraph"], m["compiled"])})
    return {"suites": suites, "table": table,
            "categories": {str(c): n for c, n in Counter(r.category for r in rows).items()},
            "blocking_ops": blocking_ops(rows), "blocking_breaks": blocking_breaks(rows), "time": time_by_phase(rows)}


PHASES = ("start", "setup", "build", "first_call", "compile")


def time_by_phase(rows: list[Row]) -> dict[str, float] | None:
    """Where the workers' time went, summed over the rows (Row.phases), with ``modes``: the modes' time after
    their first target call. ``compile`` lies within ``first_call`` and ``modes``. None when no row has phases
    (a store written before they were measured)."""
    timed = [r for r in rows if r.phases]
    if not timed:
        return None
    total = {p: round(sum(r.phases.get(p) or 0.0 for r in timed), 3) for p in PHASES}
    total["modes"] = round(sum(max(0.0, (r.case_s or 0.0) - (r.phases.get("first_call") or 0.0)) for r in timed), 3)
    return total


def headline(summary: dict, device: str, compiled: str | None, versions: dict) -> list[str]:
    """What a migration decides, first: per suite, for all modes and then each mode, how many architectures work,
    work only with predicted host fallbacks (the top ops named), fail on the device, are host-limited or skipped;
    then the versions."""
    how = f"compile={compiled}" if compiled else "eager"
    lines = []
    for suite, ss in summary["suites"].items():
        present = [m for m, s in ss["modes"].items() if s["rows"]]
        if len(present) > 1:
            a = ss["all_modes"]
            lines.append(_decision(f"{suite} on {device} ({how}), all modes ({', '.join(present)})", a))
        for mode in present:
            s = ss["modes"][mode]
            lines.append(_decision(f"{suite} on {device} ({how}), {mode}", s))
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return lines


def _decision(what: str, counts: dict) -> str:
    """``WHAT: R of M architectures run to completion on the device (A work, B only with predicted host fallbacks:
    top ops), F fail on the device; no verdict: H host-limited, S skipped``."""
    n = {Outcome(k): v for k, v in counts["outcomes"].items()}
    runs = n[Outcome.WORKS] + n[Outcome.HOST_FALLBACKS] + n[Outcome.RECOMPILES]
    measured = runs + n[Outcome.FAILS]
    terms = [f"{n[Outcome.WORKS]} work as they are", f"{n[Outcome.HOST_FALLBACKS]} only with predicted host fallbacks"
             + (": " + ", ".join(f"{e['op']} in {e['architectures']}" for e in counts["host_fallback_ops"])
                if n[Outcome.HOST_FALLBACKS] else "")]
    if n[Outcome.RECOMPILES]:
        terms.append(f"{n[Outcome.RECOMPILES]} compiling a graph per input shape")
    return (f"{what}: {runs} of {measured} architectures run to completion on the device ({'; '.join(terms)}), "
            f"{n[Outcome.FAILS]} fail on the device; no verdict: {n[Outcome.HOST_LIMITED]} host-limited, "
            f"{n[Outcome.SKIPPED]} skipped")


def expected_rows(baseline: dict) -> dict[str, str]:
    """A baseline's expected category by case (``suite/arch/mode``); version 1 files hold causal-LM rows only."""
    rows = baseline.get("rows", {})
    if baseline.get("format_version", 1) < 2:
        return {f"{DEFAULT_SUITE}/{k}": v for k, v in rows.items()}
    return dict(rows)


def compare_baseline(rows: list[Row], baseline: dict) -> tuple[list[Row], dict]:
    """The rows, each marked unchanged / fixed / regressed / new against the expected categories, and the counts."""
    expected = expected_rows(baseline)
    marks: dict[str, Mark] = {}
    marked = []
    for r in rows:
        was = expected.get(r.case)
        if was is None:
            mark = Mark.NEW
        elif was == Category.PASS and r.category != Category.PASS:
            mark = Mark.REGRESSED
        elif was != Category.PASS and r.category == Category.PASS:
            mark = Mark.FIXED
        else:
            mark = Mark.UNCHANGED
        marks[r.case] = mark
        marked.append(dataclasses.replace(r, baseline=mark))
    counts = Counter(marks.values())
    return marked, {"counts": {str(m): counts.get(m, 0) for m in Mark},
                    "regressed": sorted(k for k, m in marks.items() if m == Mark.REGRESSED),
                    "fixed": sorted(k for k, m in marks.items() if m == Mark.FIXED),
                    "missing": sorted(set(expected) - set(marks))}


def baseline_from(rows: list[Row], device: str, config: dict, versions: dict) -> dict:
    """The expected category of every row, and each architecture's measured seconds (``cost_s``,
    summed over its modes: the cost ``--shard`` balances)."""
    cost: Counter[str] = Counter()
    for r in rows:
        cost[f"{r.suite}/{r.arch}"] += r.wall_s
    return {"format_version": BASELINE_VERSION, "device": device, "compile": config.get("compile"),
            "modes": config.get("modes"), "versions": versions,
            "note": "expected category per suite/architecture/mode; regenerate with `ferry coverage --write-baseline FILE`",
            "rows": {r.case: str(r.category) for r in sorted(rows, key=lambda r: r.case)},
            "cost_s": {k: round(v, 1) for k, v in sorted(cost.items())}}
