"""The terminal report: findings grouped by file, each with its fix, then one summary line."""

from __future__ import annotations

from torchferry.scan.model import Finding, ScanResult


def _where(finding: Finding) -> str:
    cell = f"cell[{finding.cell}] " if finding.cell is not None else ""
    return f"{cell}{finding.line}:{finding.column}"


def _status(finding: Finding) -> str:
    if finding.fixed:
        return " [fixed]"
    return " [fixable: --fix]" if finding.fixable else ""


def render(result: ScanResult) -> str:
    """The whole report as text (no colour: it is read in logs as often as on a terminal)."""
    lines: list[str] = []
    for file in result.files:
        if not file.findings and not file.error and not file.not_written:
            continue
        lines.append(file.path)
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
    if result.not_written:
        summary += f"; fixes not written to {len(result.not_written)} file{'s' if len(result.not_written) != 1 else ''}"
    lines.append(summary + ".")
    return "\n".join(lines)
