"""`ferry check` keeps everything measured whatever stops it, and refuses bad input before any worker starts."""

from __future__ import annotations

import json

import pytest
from checkrun import FAST, FIXTURES, MLP_FORWARD_WITH_PROGRESS, run_check

from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # whole ferry check runs: worker processes each import torch and build the workload

FAILING = FIXTURES / "failing.py"


@pytest.mark.slow  # ~40 s: the reference runs to the end, then the target hangs for --timeout 20
def test_a_hanging_target_leaves_the_references_timing_in_the_report(check):
    result = check("--target", "cpu", "-w", f"{FAILING}:hang_target", "--timeout", "20", *FAST)
    assert result.exit_status == ExitStatus.TIMEOUT, result.stderr
    report = result.report
    assert report["failure"]["kind"] == "timeout" and report["failure"]["phase"] == "target"
    assert report["timing"]["ref"]["time_to_n_s"] > 0 and len(report["timing"]["ref"]["steps"]) == 2
    assert report["timing"]["status"] == "partial" and report["verdict"] == "stopped"
    assert "stopped: timeout" in result.stdout and "NO-GO" not in result.stdout


def test_ctrl_c_during_the_target_keeps_the_reference_and_says_stopped(check, ctrl_c_raises):
    result = check("--target", "cpu", "-w", f"{FAILING}:interrupt_target", *FAST)
    assert result.exit_status == ExitStatus.INTERRUPTED, result.stderr
    report = result.report
    assert report["failure"]["kind"] == "interrupted" and report["failure"]["phase"] == "target"
    assert report["timing"]["ref"]["time_to_n_s"] > 0
    assert report["verdict"] == "stopped" and "stopped: interrupted" in result.stdout
    html = (result.report_dir / "report.html").read_text()
    assert 'id="failure"' in html and "interrupted" in html


def test_an_internal_error_still_writes_the_report_with_the_traceback_in_the_log(check, monkeypatch):
    from torchferry.check import cost

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the cost estimate")

    monkeypatch.setattr(cost, "estimate", broken)
    result = check("--target", "cpu", "-w", "mlp", "--mode", "forward", *FAST)
    assert result.exit_status == ExitStatus.INTERNAL_ERROR
    failure = result.report["failure"]
    assert failure["kind"] == "internal" and failure["phase"] == "cost"
    assert result.report["parity"]["status"] == "pass"  # measured before the bug: kept
    log = (result.report_dir / "work" / "ferry.log").read_text()
    assert "RuntimeError: a bug in the cost estimate" in log and "Traceback" in log
    assert "internal error (a bug in torchferry)" in result.stderr


def test_a_wrong_typed_price_is_a_usage_error_before_any_worker(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[instances."my-box"]\nprice_per_hour = "2.0"\ndate = "2026-01-01"\nsource = "invoice"\n')
    result = run_check(["--target", "cpu", "--prices", str(prices), *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert "price_per_hour = '2.0' (str)" in result.stderr and "my-box" in result.stderr
    assert not (tmp_path / "report" / "work").exists() and result.report is None  # nothing started


def test_an_absent_accelerator_is_device_unavailable_before_measuring(tmp_path):
    import torch

    if torch.get_device_module("cuda").is_available():
        pytest.skip("this machine has CUDA: --target cuda is usable here")
    result = run_check(["--target", "cuda", *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.DEVICE_UNAVAILABLE, result.stderr
    assert "'cuda' is not available here" in result.stderr
    assert not (tmp_path / "report" / "work").exists()


def test_a_batch_size_that_does_not_split_over_nproc_is_refused_before_any_worker(tmp_path):
    result = run_check(["--target", "cpu", "--nproc", "2", "--batch-size", "3", *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE and "does not split into 2 equal shards" in result.stderr
    assert not (tmp_path / "report" / "work").exists()


def test_a_relative_workload_path_is_resolved_against_the_callers_folder(tmp_path, monkeypatch):
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "x.py").write_text(
        "import torch\n\n"
        "def build():\n"
        "    def batch(device, seed):\n"
        "        return (torch.randn(4, 3, generator=torch.Generator().manual_seed(seed)).to(device),)\n"
        "    return torch.nn.Linear(3, 2), batch\n")
    monkeypatch.chdir(tmp_path)
    result = run_check(["--target", "cpu", "-w", "wl/x.py:build", "--mode", "forward", *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    assert result.report["config"]["source"]["resolved"]["path"] == str(tmp_path / "wl" / "x.py")
    assert result.report["parity"]["status"] == "pass"


def test_argparse_errors_go_through_the_injected_environment(tmp_path, capsys):
    result = run_check(["--steps", "many"], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE
    assert "invalid int value: 'many'" in result.stderr and capsys.readouterr().err == ""


def test_an_error_message_carries_the_command_prefix_once(tmp_path):
    result = run_check(["-w", "resnet9000", *FAST], tmp_path / "report")
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ferry check: unknown workload") and "ferry: " not in last


def test_the_report_meta_block_has_the_shared_shape(shared_check):
    result = shared_check(*MLP_FORWARD_WITH_PROGRESS)  # the run of test_check_cli.py's progress test
    meta = result.report["meta"]
    assert set(meta) == {"format", "format_version", "torchferry", "created", "command", "wall_s"}
    assert meta["format"] == "torchferry.check" and meta["command"].startswith("ferry check ")
    assert json.loads((result.report_dir / "report.json").read_text())["config"]["source"]["mode"] == "forward"
