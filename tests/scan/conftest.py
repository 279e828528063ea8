"""Shared helpers for the `ferry scan` tests: scan a snippet, fix a snippet, run the CLI in-process."""

from __future__ import annotations

import pytest
from ferryrun import ferry as run_ferry

from torchferry.scan.engine import analyse
from torchferry.scan.rules import RULES


@pytest.fixture
def ferry():
    """Run `ferry ARGS...` in-process and capture what it printed (tests/ferryrun.py)."""
    return run_ferry


@pytest.fixture
def rule_ids():
    """The rule ids found in a snippet, in position order."""

    def run(code: str) -> list[str]:
        hits, _ = analyse(code, RULES, fix=False)
        return [h.rule.id for h in hits]

    return run


@pytest.fixture
def fixed():
    """A snippet after the safe fixes (the snippet itself when nothing is fixable)."""

    def run(code: str) -> str:
        _, new = analyse(code, RULES, fix=True)
        return code if new is None else new

    return run
