"""The one in-process `ferry` runner of the tests: `torchferry.cli.main(argv, env)` with captured streams.

Every test folder runs the CLI through ``ferry(*argv)``; ``ferry_report`` adds the JSON report a
command wrote. A module of its own (not conftest) so that every test folder imports it by a unique name."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torchferry.cli import main
from torchferry.env import Environment


@dataclass
class FerryRun:
    """What one `ferry` run left: its exit status, what it printed, and the JSON report it wrote (if any).

    Unpacks as ``status, stdout, stderr``."""

    exit_status: int
    stdout: str
    stderr: str
    report: dict | None = None
    report_dir: Path | None = None

    def __iter__(self) -> Iterator:
        return iter((self.exit_status, self.stdout, self.stderr))

    @property
    def json(self) -> dict:
        """Standard output read as JSON (``--format json``)."""
        return json.loads(self.stdout)


def ferry(*argv: str) -> FerryRun:
    """`ferry ARGV` in-process, with captured streams (no TTY, no colours)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), Environment(stdout=out, stderr=err, stdout_isatty=False, colors=False))
    return FerryRun(status, out.getvalue(), err.getvalue())


def ferry_report(*argv: str, output: Path, report: str) -> FerryRun:
    """`ferry ARGV -o OUTPUT` (``-o`` before a ``--`` command), with ``OUTPUT/REPORT`` loaded when the run wrote it."""
    cut = argv.index("--") if "--" in argv else len(argv)
    run = ferry(*argv[:cut], "-o", str(output), *argv[cut:])
    path = output / report
    run.report, run.report_dir = (json.loads(path.read_text()) if path.is_file() else None), output
    return run
