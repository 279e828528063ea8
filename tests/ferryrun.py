"""The one in-process `ferry` runner of the tests: `torchferry.cli.main(argv, env)` with captured streams.

A module of its own (not conftest) so that every test folder imports it by a unique name."""

from __future__ import annotations

import io

from torchferry.cli import main
from torchferry.env import Environment


def ferry(*argv: str) -> tuple[int, str, str]:
    """`ferry ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err, stdout_isatty=False, colors=False))
    return code, out.getvalue(), err.getvalue()
