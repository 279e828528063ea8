"""Shared helpers for the `ferry scan` tests: scan a snippet, fix a snippet, run the CLI in-process."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pytest

from torchferry.cli import main
from torchferry.env import Environment
from torchferry.scan.engine import analyse
from torchferry.scan.rules import RULES


@dataclass
class CliResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


@pytest.fixture
def ferry():
    """Run `ferry ARGS...` in-process and capture what it printed."""

    def run(*argv: str) -> CliResult:
        env = Environment(stdout=io.StringIO(), stderr=io.StringIO())
        status = main(list(argv), env)
        return CliResult(status, env.stdout.getvalue(), env.stderr.getvalue())

    return run


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
