"""Gold files pin the text and JSON renderers of the check and coverage result models.

Expected output lives in tests/report/gold/; a renderer change that alters it fails here.
Text is compared exactly (its numbers are formatted to a few digits). JSON is compared as data
with every float rounded to ``FLOAT_DIGITS`` significant digits on both sides: a float64 computed
on another CPU may differ in its last places (a cosine of 0.8918715575979688 on one machine was
0.8918715575979684 on another), which says nothing about the renderer.
After an intended change, regenerate with ``TORCHFERRY_UPDATE_GOLD=1 python -m pytest tests/report``
and review the diff (``git diff tests/report/gold``) like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from torchferry.coverage import results
from torchferry.report import coverage_render, jsonreport, text
from torchferry.report.coverage import FORMAT, FORMAT_VERSION, Category, CoverageReport, Mark, Row
from torchferry.report.meta import Failure, Meta

GOLD = Path(__file__).with_name("gold")
UPDATE = os.environ.get("TORCHFERRY_UPDATE_GOLD") == "1"
FLOAT_DIGITS = 12  # significant digits of a float compared in a JSON gold file (float64 keeps 15-17)


def rounded(value: Any) -> Any:
    """``value`` (parsed JSON) with every float rounded to FLOAT_DIGITS significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def check_gold(name: str, actual: str) -> None:
    path = GOLD / name
    if UPDATE:
        path.write_text(actual)
    assert path.is_file(), f"missing gold file {path}; create it with TORCHFERRY_UPDATE_GOLD=1"
    expected = path.read_text()
    same = (rounded(json.loads(actual)) == rounded(json.loads(expected))) if name.endswith(".json") else actual == expected
    assert same, f"{name} differs from its gold file; if intended, regenerate (see module docstring)"


def test_json_gold_files_compare_floats_at_the_stated_precision_and_nothing_else():
    assert rounded({"cosine": 0.8918715575979688}) == rounded({"cosine": 0.8918715575979684})
    assert rounded({"cosine": 0.89187155}) != rounded({"cosine": 0.89187156})
    assert rounded([1.0000000000000002, "1.0000000000000002"]) == [1.0, "1.0000000000000002"]  # strings stay exact


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
    report.timing = timing.summarise(report.timing.ref, None, steps=report.timing.steps)
    report.failure = Failure(kind="timeout", message="the target worker gave no result within 20 s (target run)",
                             exit_status=8, phase="target", log="work/ferry.log")
    verdict.decide(report)
    check_gold("check-stopped.txt", text.render(report, ["report.json", "report.html"]))


def test_coverage_text_gold(coverage_report):
    check_gold("coverage.txt", coverage_render.render_text(coverage_report) + "\n")


def test_coverage_json_gold(coverage_report):
    check_gold("coverage.json", jsonreport.render(coverage_report))
