"""In-process `ferry check` runs for the CLI tests, and where the fixture workloads live.

A module of its own (not conftest) so that test files import it by a unique name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ferryrun import ferry

FIXTURES = Path(__file__).parents[1] / "check" / "fixtures"  # shared with tests/check
FAST = ["--steps", "2", "--rounds", "1", "--reps", "1", "-q"]
# A short mlp forward check with progress on stderr (FAST without -q): one run, shared by the tests that read it.
MLP_FORWARD_WITH_PROGRESS = ("--target", "cpu", "-w", "mlp", "--mode", "inference", "--steps", "2", "--rounds", "1",
                             "--reps", "1")


@dataclass
class CliResult:
    exit_status: int
    stdout: str
    stderr: str
    report: dict | None
    report_dir: Path


def run_check(args: list[str], output: Path) -> CliResult:
    """`ferry check ARGS -o OUTPUT` in-process, with captured streams and the JSON report if written."""
    status, stdout, stderr = ferry("check", *args, "-o", str(output))
    path = output / "report.json"
    report = json.loads(path.read_text()) if path.is_file() else None
    return CliResult(status, stdout, stderr, report, output)


