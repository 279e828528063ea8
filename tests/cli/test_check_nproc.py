"""`ferry check --nproc N`: the target trains data-parallel (DDP) in N processes over the device's
own process-group backend; parity is judged against the single-process reference on the global
batch, every rank's time is reported, and a rank that dies or hangs fails the run with its name."""

from __future__ import annotations

import pytest
from checkrun import FAST, FIXTURES

from torchferry.report.check import FORMAT_VERSION
from torchferry.status import ExitStatus

pytestmark = pytest.mark.multiproc


def test_ddp_over_two_neuron_ranks_keeps_parity_and_reports_each_rank(check):
    result = check("-w", "mlp", "--nproc", "2", "--target", "neuron", *FAST)
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    report = result.report
    assert report["meta"]["format_version"] == FORMAT_VERSION and report["config"]["source"]["nproc"] == 2
    parity = report["parity"]
    assert parity["status"] == "pass"
    assert parity["loss_curve"]["comparison"]["passed"] and len(parity["loss_curve"]["target"]) == 2
    assert parity["gradients"] and all(g["passed"] for g in parity["gradients"])  # DDP's averaged gradients
    ranks = report["timing"]["ranks"]
    assert [(r["rank"], r["device"]) for r in ranks] == [(0, "neuron:0"), (1, "neuron:1")]
    for r in ranks:
        assert r["time_to_n_s"] > 0 and len(r["steps"]) == 2 and r["steady"]["samples"] == 1
    assert report["timing"]["target"]["time_to_n_s"] == ranks[0]["time_to_n_s"]
    assert report["resume"]["status"] == "pass"  # rank 0's checkpoint resumes in one plain process
    assert "per rank (2 DDP processes):" in result.stdout and "neuron:1" in result.stdout


def test_a_rank_that_dies_fails_the_run_and_is_named(check):
    result = check("--target", "cpu", "--nproc", "2", "-w", f"{FIXTURES / 'failing.py'}:rank1_dies", *FAST)
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT, result.stdout + result.stderr
    assert result.report["parity"]["status"] == "fail_to_run"
    message = result.report["failure"]["message"]
    assert message.startswith("the target rank 1 process on 'cpu' died (exit status 3)")
    assert "[other ranks: target rank 0: " in message  # every rank's state is given


def test_a_rank_that_hangs_fails_the_run_within_the_collective_timeout(check, monkeypatch):
    monkeypatch.setenv("TORCHFERRY_COLLECTIVE_TIMEOUT", "5")
    result = check("--target", "neuron", "--nproc", "2", "-w", f"{FIXTURES / 'failing.py'}:rank1_hangs", *FAST)
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT, result.stdout + result.stderr
    message = result.report["failure"]["message"]
    assert result.report["parity"]["status"] == "fail_to_run"
    assert "target rank 1: no answer 10 s after target rank 0 failed; killed" in message


def test_nproc_rejects_a_batch_that_does_not_split_evenly(check):
    result = check("--target", "cpu", "-w", "mlp", "--nproc", "3", *FAST)
    assert result.exit_status == ExitStatus.USAGE, result.stdout + result.stderr
    assert "does not split into --nproc 3 equal shards" in result.report["failure"]["message"]
