"""The result model of `ferry scan`, the one every renderer reads: rules, findings, per-file results.

The rules (torchferry/scan/rules/) and the engine produce these values and
torchferry/report/scan_render.py renders them; like the other commands' models they live in the
report layer, so that a renderer never imports a command.

FORMAT_VERSION history of the JSON report (``meta.format = "torchferry.scan"``):
- 1: first version: meta, rules, files (path, error, fixed), findings, summary.
- 2: files[].not_written (why --fix left a file unchanged), summary.not_written.
- 3: the `meta` block shared with check, coverage and plan (meta.format, meta.format_version,
  meta.torchferry, meta.created, meta.command); `fixes_applied` moves to `summary`.
- 4: files[].skipped (why a file was not scanned), summary.skipped.
- 5: findings[].guard: the branch only CUDA takes that holds the finding (line, test, decided_by,
  flags, options, fallback_line), or null; a guarded finding's severity is below its rule's.
- 6: rules[].symptom: the error a run raises away from the finding's line when the finding is its
  cause (TF006: a "gloo" group chosen where CUDA is not fails in DDP's constructor), or null.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

FORMAT = "torchferry.scan"
FORMAT_VERSION = 6


class Severity(str, Enum):
    """How much a finding blocks a migration; ordered by `rank`."""

    INFO = "info"  # harmless on the target, but worth knowing (a setting that is ignored)
    WARNING = "warning"  # runs, but not as intended, or breaks off CUDA in some paths
    ERROR = "error"  # fails on a non-CUDA accelerator

    @property
    def rank(self) -> int:
        return ("info", "warning", "error").index(self.value)


@dataclass(frozen=True)
class Hit:
    """What a rule's `check` yields: where, an optional specific message, and an optional safe fix.

    `fix` maps the already-rewritten version of `target` (default: `node`) to its replacement,
    so that fixes nested inside each other compose.
    """

    node: Any
    message: str | None = None
    fix: Callable[[Any], Any] | None = None
    target: Any = None
    severity: Severity | None = None  # when this hit is less severe than its rule (a compared "cuda"); None: the rule's


@dataclass(frozen=True)
class Rule:
    """One migration hazard: metadata for the reports plus the check that finds it."""

    id: str
    name: str
    severity: Severity
    summary: str  # one line: what is wrong
    fix: str  # one line: what to write instead
    node_types: tuple[type, ...]  # the `ast` classes `check` is called on
    check: Callable[[Any, Any], Iterator[Hit]]
    safe_fix: str = ""  # one line: what --fix rewrites, and when; "" = never rewritten
    # A regular expression found in every source this rule can report in (None: any source can
    # hold a finding). The scan runs the rule only where it matches (a source no rule matches is
    # only parsed), so it must never miss: derive it from the names the check compares.
    prefilter: str | None = None
    # A finer test of the same kind, on Python's own tree of a source (`torchferry.scan.syntax.SourceTree`):
    # the rule runs only where it returns True (None: always).
    # It must never miss either: `syntax.refers_to("torch.load")` for a rule that compares qualified names.
    gate: Callable[[Any], bool] | None = None
    # The hazard is code that works on CUDA only (TF001-TF018): where no run without CUDA reaches it, it cannot fail
    # on another accelerator, and is reported below the rule's severity with its guard (torchferry/scan/reach.py).
    tied_to_cuda: bool = False
    # The finding chooses where work runs (a device, a process-group backend): chosen only when the machine has CUDA
    # while the other branch picks the CPU, it is a silent CPU fallback and keeps the rule's severity.
    picks_device: bool = False
    # What a run raises away from the finding's line when the finding is the cause (a "gloo" group chosen where CUDA
    # is not fails at its first collective on an accelerator's tensors): a text of that error, "" = none known.
    # `ferry check` names the finding as the cause of a failure whose message holds it.
    symptom: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "severity": self.severity.value,
            "summary": self.summary,
            "fix": self.fix,
            "safe_fix": self.safe_fix or None,
            "symptom": self.symptom or None,
        }


@dataclass(frozen=True)
class Guard:
    """The branch point that keeps a finding's code off machines without CUDA (docs/scan.md, "Code only CUDA runs").

    `decided_by` is "device" when the machine decides (no run without CUDA reaches the code) and "flag" when a
    CUDA flag does (`args.cuda`, `use_gpu`): a run without the flag does not reach it, a run with it does.
    `fallback_line` is set when the code picks the device (or backend) and the other branch picks the CPU: a
    machine without CUDA then runs on the CPU without a word, so the finding keeps its rule's severity.
    """

    line: int  # the `if` / `elif` / `while` / conditional expression / early exit, in the finding's file or cell
    test: str  # its test, as written
    decided_by: str  # "device" | "flag"
    flags: tuple[str, ...] = ()  # the flags assumed not given, as the code reads them ("args.cuda")
    options: tuple[str, ...] = ()  # their command-line options, where the source declares them ("--cuda")
    fallback_line: int | None = None  # where the other branch picks the CPU ("cpu", "gloo", `.cpu()`)

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "test": self.test, "decided_by": self.decided_by, "flags": list(self.flags),
                "options": list(self.options), "fallback_line": self.fallback_line}


@dataclass(frozen=True)
class Finding:
    """One hazard at one place. `line` and `column` are 1-based; in a notebook they count within `cell`."""

    path: str
    line: int
    column: int
    rule_id: str
    severity: Severity
    message: str
    fix: str
    fixable: bool
    cell: int | None = None  # index of the notebook cell (all cells counted), None for .py files
    fixed: bool = False  # --fix rewrote it
    guard: Guard | None = None  # the branch only CUDA takes that holds it; None: every run can reach it

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "cell": self.cell,
            "line": self.line,
            "column": self.column,
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "message": self.message,
            "fix": self.fix,
            "fixable": self.fixable,
            "fixed": self.fixed,
            "guard": self.guard.to_dict() if self.guard is not None else None,
        }


@dataclass
class FileResult:
    """The outcome for one file: its findings, or why it could not be scanned, and its diff."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # set when the file (or a notebook cell) could not be parsed
    diff: str = ""  # unified diff of the safe fixes; "" when there are none
    written: bool = False  # --fix wrote the rewritten file
    not_written: str | None = None  # why --fix left the file as it was (read-only, cannot write ...)
    skipped: str | None = None  # why the file was not scanned (too large, generated) and the flag that scans it

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "error": self.error, "fixed": self.written, "not_written": self.not_written,
                "skipped": self.skipped}


@dataclass
class ScanResult:
    """Everything one `ferry scan` found, in path order."""

    files: list[FileResult]
    rules: tuple[Rule, ...]  # the rules the scan ran, in report order
    fixes_applied: bool = False

    @property
    def findings(self) -> list[Finding]:
        return [f for result in self.files for f in result.findings]

    @property
    def unparseable(self) -> list[FileResult]:
        return [r for r in self.files if r.error]

    @property
    def skipped(self) -> list[FileResult]:
        """Files left unscanned by the size limit or as generated code."""
        return [r for r in self.files if r.skipped]

    @property
    def not_written(self) -> list[FileResult]:
        """Files whose safe fixes --fix could not (or would not) write."""
        return [r for r in self.files if r.not_written]

    def open_findings(self) -> list[Finding]:
        """Findings still in the code (those --fix rewrote are gone)."""
        return [f for f in self.findings if not f.fixed]

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for finding in self.open_findings():
            counts[finding.severity.value] += 1
        return counts
