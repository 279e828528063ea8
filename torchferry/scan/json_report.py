"""The machine-readable report: versioned JSON with a `meta` block."""

from __future__ import annotations

import datetime
from typing import Any

from torchferry import __version__
from torchferry.scan.model import ScanResult
from torchferry.scan.rules import RULES

# 1: first version: meta, rules, files (path, error, fixed), findings, summary.
# 2: files[].not_written (why --fix left a file unchanged), summary.not_written.
FORMAT_VERSION = 2


def to_dict(result: ScanResult) -> dict[str, Any]:
    """The report as plain data; `findings[].line/column` are 1-based, `cell` indexes a notebook's cells."""
    return {
        "format": "torchferry-scan",
        "format_version": FORMAT_VERSION,
        "meta": {
            "tool": "torchferry",
            "version": __version__,
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "fixes_applied": result.fixes_applied,
        },
        "rules": [rule.to_dict() for rule in RULES],
        "files": [file.to_dict() for file in result.files],
        "findings": [finding.to_dict() for finding in result.findings],
        "summary": {"open": result.counts(), "fixed": sum(f.fixed for f in result.findings),
                    "unparseable": len(result.unparseable), "not_written": len(result.not_written)},
    }
