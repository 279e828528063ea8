"""`ferry check --trace` end to end, in-process: one torch.profiler Chrome trace per device in the report folder,
with the built-in device's events on its own track, listed by the terminal report and linked from the HTML; and the
default warm-up process before the timed workers (which the other check tests turn off)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ferryrun import ferry

pytestmark = pytest.mark.slow  # whole ferry check runs: worker processes each import torch and build the workload


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "report"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TORCHFERRY_CHECK_WARMUP", "1")  # the default, which the other check tests turn off
        code, stdout, stderr = ferry("check", "-w", "mlp", "--mode", "forward", "--target", "neuron", "--steps", "1",
                                     "--rounds", "1", "--reps", "1", "-q", "--trace", "-o", str(out))
    assert code == 0, stdout + stderr
    return out, stdout, json.loads((out / "report.json").read_text())


def test_one_trace_per_device_in_the_report_folder_with_device_events(profiled):
    out, _, report = profiled
    paths = {role: report["timing"][role]["profile_trace"] for role in ("ref", "target")}
    assert {Path(p).parent for p in paths.values()} == {out}
    traces = {role: json.loads(Path(p).read_text())["traceEvents"] for role, p in paths.items()}
    kernels = [e for e in traces["target"] if e.get("cat") == "kernel"]
    assert kernels and all(e["args"]["device"] == "neuron:0" for e in kernels), kernels[:3]
    assert {"aten::addmm", "aten::relu"} & {e["name"] for e in kernels}
    assert not [e for e in traces["ref"] if e.get("cat") == "kernel"]  # the CPU reference has no device track
    assert any(e.get("cat") == "cpu_op" for e in traces["ref"])


def test_the_reports_list_and_link_the_traces(profiled):
    out, stdout, report = profiled
    html = (out / "report.html").read_text()
    for role in ("ref", "target"):
        path = Path(report["timing"][role]["profile_trace"])
        assert f"trace ({role} " in stdout and str(path) in stdout
        assert f'href="{path.name}"' in html


def test_a_warm_up_process_ran_before_the_timed_workers(profiled):
    out, _, report = profiled
    assert (out / "work" / "warm.log").is_file() and report["config"]["source"]["warm_up"] is True
    warm = next(i for i, line in enumerate(report["progress"]) if line.startswith("warm-up: imports and workload build"))
    assert warm < next(i for i, line in enumerate(report["progress"]) if line.startswith("reference cpu: starting"))
    assert any("a throwaway process imported and built everything once before" in n for n in report["timing"]["notes"])
