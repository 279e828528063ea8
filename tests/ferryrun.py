"""The one in-process `ferry` runner of the tests: `torchferry.cli.main(argv, env)` with captured streams.

Every test folder runs the CLI through ``ferry(*argv)``; ``ferry_report`` adds the JSON report a
command wrote. A module of its own (not conftest) so that every test folder imports it by a unique name."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
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


def signal_ferry_when(argv: list[str], cwd: Path, log: Path, marker: str, signum: int) -> tuple[int, str, str]:
    """`python -m torchferry ARGV` as its own process (signals reach a real process, not this one): once ``log`` holds
    ``marker`` (the script waits there), send it ``signum``; its exit status and what it printed."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "torchferry", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (log.is_file() and marker in log.read_text()):
        time.sleep(0.5)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err
