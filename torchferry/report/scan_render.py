"""Renderers of `ferry scan`'s result model: the terminal report, versioned JSON, and SARIF 2.1.0.

- text: findings grouped by file, each with its fix, then one summary line (no colour: it is read
  in logs as often as on a terminal).
- JSON: versioned, with the `meta` block shared with the other commands.
- SARIF, so code hosts (GitHub code scanning and others) annotate pull requests with findings.
  Notebook findings point at the notebook file; SARIF has no cells, so the cell index goes into the
  message and `properties.cell`. A finding in a branch only CUDA takes carries its guard in
  `properties.guard`, as in JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torchferry import __version__
from torchferry.report.meta import new_meta
from torchferry.report.scan import FORMAT, FORMAT_VERSION, Finding, ScanResult, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _where(finding: Finding) -> str:
    cell = f"cell[{finding.cell}] " if finding.cell is not None else ""
    return f"{cell}{finding.line}:{finding.column}"


def _status(finding: Finding) -> str:
    if finding.fixed:
        return " [fixed]"
    return " [fixable: --fix]" if finding.fixable else ""


def render_text(result: ScanResult) -> str:
    """The whole report as text (no colour: it is read in logs as often as on a terminal)."""
    lines: list[str] = []
    for file in result.files:
        if not file.findings and not file.error and not file.not_written and not file.skipped:
            continue
        lines.append(file.path)
        if file.skipped:
            lines.append(f"  {file.skipped}")
        if file.error:
            lines.append(f"  {file.error} (not scanned there, not changed)")
        if file.not_written:
            lines.append(f"  fixes not written: {file.not_written}")
        for f in file.findings:
            lines.append(f"  {_where(f)}  {f.severity.value}  {f.rule_id}  {f.message}{_status(f)}")
            lines.append(f"      fix: {f.fix}")
        lines.append("")
    counts = result.counts()
    total = sum(counts.values())
    fixed = sum(f.fixed for f in result.findings)
    fixable = sum(f.fixable and not f.fixed for f in result.findings)
    summary = (f"{total} finding{'s' if total != 1 else ''} ({counts['error']} error, {counts['warning']} warning, "
               f"{counts['info']} info) in {len(result.files)} file{'s' if len(result.files) != 1 else ''}")
    if fixed:
        summary += f"; {fixed} fixed"
    if fixable:
        summary += f"; {fixable} fixable with --fix"
    if result.unparseable:
        summary += f"; {len(result.unparseable)} could not be parsed"
    if result.skipped:
        summary += f"; {len(result.skipped)} skipped"
    if result.not_written:
        summary += f"; fixes not written to {len(result.not_written)} file{'s' if len(result.not_written) != 1 else ''}"
    lines.append(summary + ".")
    return "\n".join(lines)


def to_json(result: ScanResult, argv: Sequence[str] = ()) -> dict[str, Any]:
    """The report as plain data; `findings[].line/column` are 1-based, `cell` indexes a notebook's cells."""
    return {
        "meta": asdict(new_meta(FORMAT, FORMAT_VERSION, argv)),
        "rules": [rule.to_dict() for rule in result.rules],
        "files": [file.to_dict() for file in result.files],
        "findings": [finding.to_dict() for finding in result.findings],
        "summary": {"open": result.counts(), "fixes_applied": result.fixes_applied, "fixed": sum(f.fixed for f in result.findings),
                    "unparseable": len(result.unparseable), "not_written": len(result.not_written),
                    "skipped": len(result.skipped)},
    }


def _artifact(path: str) -> dict[str, str]:
    p = Path(path)
    if p.is_absolute():
        return {"uri": p.as_uri()}
    return {"uri": p.as_posix(), "uriBaseId": "%SRCROOT%"}


def _result(finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    cell = f"cell[{finding.cell}] " if finding.cell is not None else ""
    result = {
        "ruleId": finding.rule_id,
        "ruleIndex": index[finding.rule_id],
        "level": LEVELS[finding.severity],
        "message": {"text": f"{cell}{finding.message} Fix: {finding.fix}"},
        "locations": [{"physicalLocation": {
            "artifactLocation": _artifact(finding.path),
            "region": {"startLine": finding.line, "startColumn": finding.column},
        }}],
    }
    properties: dict[str, Any] = {}
    if finding.cell is not None:
        properties["cell"] = finding.cell
    if finding.guard is not None:
        properties["guard"] = finding.guard.to_dict()
    if properties:
        result["properties"] = properties
    return result


def to_sarif(result: ScanResult) -> dict[str, Any]:
    """One SARIF run: the rule table, a result per open finding, unparseable, unwritten and skipped files as notifications."""
    rules = [{
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "help": {"text": f"Fix: {rule.fix}" + (f" (--fix: {rule.safe_fix})" if rule.safe_fix else "")},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
    } for rule in result.rules]
    index = {rule.id: i for i, rule in enumerate(result.rules)}
    notifications = [{
        "level": "error",
        "message": {"text": f"{file.error}; not scanned there, not changed"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(file.path)}}],
    } for file in result.unparseable] + [{
        "level": "warning",
        "message": {"text": f"fixes not written: {file.not_written}"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(file.path)}}],
    } for file in result.not_written] + [{
        "level": "note",
        "message": {"text": file.skipped},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(file.path)}}],
    } for file in result.skipped]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "torchferry", "version": __version__, "rules": rules}},
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
            "results": [_result(f, index) for f in result.open_findings()],
        }],
    }
