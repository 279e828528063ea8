"""Fixtures of the CLI tests."""

import pytest

from checkrun import run_check


@pytest.fixture(autouse=True)
def no_warm_up(monkeypatch):
    """No warm-up process before the timed workers: it evens out cold-start figures, which no CLI test judges, at the
    cost of a process start, import torch and a workload build per run (tests/check/test_check_profile.py keeps it)."""
    monkeypatch.setenv("TORCHFERRY_CHECK_WARMUP", "0")


@pytest.fixture
def check(tmp_path):
    return lambda *args: run_check([*args], tmp_path / "report")
