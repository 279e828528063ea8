"""The machine-readable report: versioned JSON with a `meta` block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from torchferry.report.meta import new_meta
from torchferry.scan.model import ScanResult
from torchferry.scan.rules import RULES

FORMAT = "torchferry.scan"
# 1: first version: meta, rules, files (path, error, fixed), findings, summary.
# 2: files[].not_written (why --fix left a file unchanged), summary.not_written.
# 3: the `meta` block shared with check, coverage and plan (meta.format, meta.format_version,
#    meta.torchferry, meta.created, meta.command); `fixes_applied` moves to `summary`.
FORMAT_VERSION = 3


def to_dict(result: ScanResult, argv: Sequence[str] = ()) -> dict[str, Any]:
    """The report as plain data; `findings[].line/column` are 1-based, `cell` indexes a notebook's cells."""
    return {
        "meta": asdict(new_meta(FORMAT, FORMAT_VERSION, argv)),
        "rules": [rule.to_dict() for rule in RULES],
        "files": [file.to_dict() for file in result.files],
        "findings": [finding.to_dict() for finding in result.findings],
        "summary": {"open": result.counts(), "fixes_applied": result.fixes_applied, "fixed": sum(f.fixed for f in result.findings),
                    "unparseable": len(result.unparseable), "not_written": len(result.not_written)},
    }
