"""In-process `ferry check` runs for the CLI tests, and where the fixture workloads live.

A module of its own (not conftest) so that test files import it by a unique name."""

from __future__ import annotations

from pathlib import Path

from ferryrun import FerryRun, ferry_report

FIXTURES = Path(__file__).parents[1] / "check" / "fixtures"  # shared with tests/check
FAST = ["--steps", "2", "--rounds", "1", "--reps", "1", "-q"]
# A short mlp forward check with progress on stderr (FAST without -q): one run, shared by the tests that read it.
MLP_FORWARD_WITH_PROGRESS = ("--target", "cpu", "-w", "mlp", "--mode", "inference", "--steps", "2", "--rounds", "1",
                             "--reps", "1")


def run_check(args: list[str], output: Path) -> FerryRun:
    """`ferry check ARGS -o OUTPUT` in-process, with captured streams and the JSON report if written."""
    return ferry_report("check", *args, output=output, report="report.json")


