"""Fixture workloads of the `ferry check` tests live in ./fixtures (also used by tests/cli)."""

import pytest


@pytest.fixture(autouse=True)
def no_warm_up(monkeypatch):
    """No warm-up process before the timed workers (it only evens out cold-start figures, which no test judges;
    it would add a process start, import torch and a workload build to every run). test_check_profile.py keeps it."""
    monkeypatch.setenv("TORCHFERRY_CHECK_WARMUP", "0")
