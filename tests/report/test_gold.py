"""Gold files pin the text and JSON renderers of the check and coverage result models.

Expected output lives in tests/report/gold/; a renderer change that alters it fails here.
After an intended change, regenerate with ``TORCHFERRY_UPDATE_GOLD=1 python -m pytest tests/report``
and review the diff (``git diff tests/report/gold``) like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchferry.coverage import results
from torchferry.report import coverage_render, jsonreport, text
from torchferry.report.coverage import FORMAT, FORMAT_VERSION, Category, CoverageReport, Mark, Row
from torchferry.report.meta import Failure, Meta

GOLD = Path(__file__).with_name("gold")
UPDATE = os.environ.get("TORCHFERRY_UPDATE_GOLD") == "1"


def check_gold(name: str, actual: str) -> None:
    path = GOLD / name
    if UPDATE:
        path.write_text(actual)
    assert path.is_file(), f"missing gold file {path}; create it with TORCHFERRY_UPDATE_GOLD=1"
    assert actual == path.read_text(), f"{name} differs from its gold file; if intended, regenerate (see module docstring)"


@pytest.fixture
def coverage_report() -> CoverageReport:
    rows = [
        Row(arch="llama", mode="forward", category=Category.PASS, reason="1 checks within tolerance", device="neuron",
            ref="cpu", wall_s=12.25, case_s=0.5, model_class="LlamaForCausalLM", variant="full", params=123456, checks=1,
            failed_checks=0, phases={"start": 1.5, "setup": 4.0, "build": 6.0, "first_call": 0.25}),
        Row(arch="mamba", mode="forward", category=Category.SKIPPED, reason="no shrunk config builds", device="neuron", ref="cpu"),
        Row(arch="planted", mode="forward", category=Category.ERROR, device="neuron", ref="cpu", wall_s=3.0,
            reason="NotImplementedError: planted_op has no kernel for device 'neuron'", log="work/planted.log"),
        Row(arch="kyutai_helium-1-2b", model_id="kyutai/helium-1-2b", mode="forward", category=Category.HOST_LIMIT,
            device="neuron", ref="cpu", dtype="bfloat16", wall_s=90.0,
            reason="no result within 90 s: this host's time limit (--timeout; process group killed)"),
    ]
    modes = ["forward"]
    summary = results.summarise(rows, modes)
    versions = {"torchferry": "0.1.0", "torch": "2.13.0"}
    report = CoverageReport(
        meta=Meta(format=FORMAT, format_version=FORMAT_VERSION, created="2026-01-01T00:00:00+00:00",
                  command="ferry coverage llama mamba planted", wall_s=42.0),
        environment={"versions": versions, "platform": "test", "cpus": 2},
        config={"modes": modes, "target": "neuron", "ref": "cpu", "jobs": 2, "compile": None},
        headline=results.headline(summary, "neuron", None, versions), summary=summary, rows=rows, complete=False,
        failure=Failure(kind="interrupted", message="stopped with Ctrl-C; finished rows kept", exit_status=130, phase="sweep"))
    report.rows, marks = results.compare_baseline(rows, {"rows": {"llama/forward": "pass", "planted/forward": "pass"}})
    report.baseline = {"file": "baseline.json", **marks}
    assert report.rows[2].baseline == Mark.REGRESSED
    return report


def test_check_text_gold(report):
    check_gold("check.txt", text.render(report, ["report.json", "report.html"]))


def test_check_json_gold(report):
    check_gold("check.json", jsonreport.render(report))


def test_stopped_check_text_gold(report):
    """A run a timeout stopped after the reference: its timing shown, ``stopped: timeout``, no verdict."""
    from torchferry.check import timing, verdict
    from torchferry.report.check import CostResult, ExitResult, ParityResult, ResumeResult

    report.parity, report.resume, report.exit, report.cost = ParityResult(), ResumeResult(), ExitResult(), CostResult()
    report.timing = timing.summarise(report.timing.ref, None)
    report.failure = Failure(kind="timeout", message="the target worker gave no result within 20 s (target run)",
                             exit_status=8, phase="target", log="work/ferry.log")
    verdict.decide(report)
    check_gold("check-stopped.txt", text.render(report, ["report.json", "report.html"]))


def test_coverage_text_gold(coverage_report):
    check_gold("coverage.txt", coverage_render.render_text(coverage_report) + "\n")


def test_coverage_json_gold(coverage_report):
    check_gold("coverage.json", jsonreport.render(coverage_report))
