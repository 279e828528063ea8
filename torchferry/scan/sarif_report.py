"""SARIF 2.1.0, so code hosts (GitHub code scanning and others) annotate pull requests with findings.

Notebook findings point at the notebook file; SARIF has no cells, so the cell index goes
into the message and `properties.cell`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchferry import __version__
from torchferry.scan.model import Finding, ScanResult, Severity
from torchferry.scan.rules import RULES

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_INDEX = {rule.id: i for i, rule in enumerate(RULES)}


def _artifact(path: str) -> dict[str, str]:
    p = Path(path)
    if p.is_absolute():
        return {"uri": p.as_uri()}
    return {"uri": p.as_posix(), "uriBaseId": "%SRCROOT%"}


def _result(finding: Finding) -> dict[str, Any]:
    cell = f"cell[{finding.cell}] " if finding.cell is not None else ""
    result = {
        "ruleId": finding.rule_id,
        "ruleIndex": _INDEX[finding.rule_id],
        "level": LEVELS[finding.severity],
        "message": {"text": f"{cell}{finding.message} Fix: {finding.fix}"},
        "locations": [{"physicalLocation": {
            "artifactLocation": _artifact(finding.path),
            "region": {"startLine": finding.line, "startColumn": finding.column},
        }}],
    }
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell}
    return result


def to_dict(result: ScanResult) -> dict[str, Any]:
    """One SARIF run: the rule table, a result per open finding, unparseable and unwritten files as notifications."""
    rules = [{
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "help": {"text": f"Fix: {rule.fix}" + (f" (--fix: {rule.safe_fix})" if rule.safe_fix else "")},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
    } for rule in RULES]
    notifications = [{
        "level": "error",
        "message": {"text": f"{file.error}; not scanned there, not changed"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(file.path)}}],
    } for file in result.unparseable] + [{
        "level": "warning",
        "message": {"text": f"fixes not written: {file.not_written}"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(file.path)}}],
    } for file in result.not_written]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "torchferry", "version": __version__, "rules": rules}},
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
            "results": [_result(f) for f in result.open_findings()],
        }],
    }
