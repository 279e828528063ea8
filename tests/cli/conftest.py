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


@pytest.fixture(scope="session")
def shared_check(tmp_path_factory):
    """`ferry check ARGS`, run once per session for each ARGS: tests that judge different parts of the same run
    (its exit code, its report, its stderr) read one run instead of starting the same workers again."""
    runs = {}

    def run(*args: str):
        if args not in runs:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("TORCHFERRY_CHECK_WARMUP", "0")  # as no_warm_up, which is per test
                runs[args] = run_check([*args], tmp_path_factory.mktemp("check") / "report")
        return runs[args]

    return run
