"""A real CheckConfig for unit tests, built by the command's own parser and validation.

A module of its own (not conftest) so that test files import it by a unique name."""

from __future__ import annotations

from pathlib import Path

from torchferry.check.config import CheckConfig
from torchferry.cli import build_parser


def make_config(tmp_path: Path, *args: str) -> CheckConfig:
    """``ferry check ARGS -o tmp_path/report`` as the frozen, validated config (nothing runs)."""
    parsed = build_parser().parse_args(["check", "--target", "cpu", *args, "-o", str(tmp_path / "report")])
    return CheckConfig.build(parsed, tmp_path)
