"""The rehearsal result end to end: in-process `ferry check` runs onto the built-in device (the default
target), each with the smallest steps and repetitions. tests/check/test_rehearsal.py judges the
purpose-built workloads on their recorded data; these two show the parts only a whole run has: the
rerun under host numerics, and a placement error reported as a portability failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferryrun import ferry
from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # whole ferry check runs: worker processes each import torch and build the workload

FIXTURES = Path(__file__).with_name("fixtures")
FAST = ["--steps", "2", "--rounds", "1", "--reps", "1", "-q"]


def check(tmp_path: Path, workload: str, *args: str) -> tuple[int, str, dict]:
    code, out, err = ferry("check", "-w", f"{FIXTURES / workload}", *FAST, *args, "-o", str(tmp_path / "r"))
    return code, out + err, json.loads((tmp_path / "r" / "report.json").read_text())


@pytest.mark.timeout(180)
def test_int64_overflow_fails_parity_and_the_host_numerics_rerun_explains_it(tmp_path):
    code, out, report = check(tmp_path, "int64_overflow.py:build", "--mode", "forward")  # forward: no resume to run
    assert code == ExitStatus.NEGATIVE_RESULT, out
    assert report["parity"]["status"] == "fail_accuracy"
    numerics = report["rehearsal"]["numerics"]
    assert numerics["rerun"] and numerics["host_parity"] == "pass" and numerics["explains"] is True, numerics
    assert numerics["first_diverging_module"] == "embed"
    assert any(c.startswith("64-bit narrowing changes the results") and "embed" in c
               for c in report["rehearsal"]["conditions"])
    rehearsal = {v["result"]: v for v in report["verdicts"]}["rehearsal"]
    assert rehearsal["verdict"] == "go-with-conditions" and "64-bit narrowing" in rehearsal["reason"]
    assert "rehearsal of trn2" in out and "host-numerics rerun: pass" in out
    html = (tmp_path / "r" / "report.html").read_text()
    assert '<section id="rehearsal">' in html
    # the signatures per step: a chart when later steps compile anew, one sentence when none does
    later = report["rehearsal"]["new_signatures"]
    if any(later):
        assert 'data-plot="eager-signatures"' in html
    else:
        assert 'data-plot="eager-signatures"' not in html and "none new in" in html


@pytest.mark.timeout(120)
def test_a_placement_error_is_a_portability_failure_naming_the_op_and_the_users_line(tmp_path):
    code, out, report = check(tmp_path, "placement.py:build")
    assert code == ExitStatus.NEGATIVE_RESULT, out  # a finding (no-go), not a crash of ours
    assert report["verdict"] == "no-go" and report["failure"]["finding"] is True
    placement = report["rehearsal"]["placement"]
    assert placement["op"] == "aten::add.Tensor" and placement["file"].endswith("fixtures/placement.py")
    assert placement["code"] == "return self.fc(x) + self.offset"
    assert report["rehearsal"]["status"] == "fail"
    line = f"placement.py:{placement['line']}"
    message = report["failure"]["message"]
    assert message.count("portability failure: aten::add.Tensor") == 1 and line in message
    rehearsal = {v["result"]: v for v in report["verdicts"]}["rehearsal"]
    assert rehearsal["verdict"] == "no-go" and line in rehearsal["reason"]
