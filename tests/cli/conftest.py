"""Fixtures of the CLI tests."""

import pytest

from checkrun import run_check


@pytest.fixture
def check(tmp_path):
    return lambda *args: run_check([*args], tmp_path / "report")
