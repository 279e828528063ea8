"""The blocks every machine-readable report shares: ``meta`` (check, coverage, scan) and ``failure``.

``format`` names the document kind (``torchferry.check``, ``torchferry.coverage``,
``torchferry.scan``), ``format_version`` its schema version (each kind's changelog is in
docs/check/report-format.md, docs/coverage.md and docs/scan.md), ``torchferry`` the tool's version,
``created`` the UTC start time, ``command`` the argv it ran with, ``wall_s`` the run's length.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from torchferry import __version__


@dataclass(kw_only=True)
class Meta:
    format: str
    format_version: int
    torchferry: str = __version__
    created: str = ""
    command: str = ""
    wall_s: float | None = None


def new_meta(kind: str, version: int, argv: Sequence[str] = ()) -> Meta:
    """A meta block stamped now; ``argv`` is the command's own arguments (without ``ferry``)."""
    return Meta(format=kind, format_version=version, command=" ".join(["ferry", *argv]),
                created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


@dataclass
class Failure:
    """What stopped the run: an error slug (docs/check/errors.md), its message, the exit code."""

    kind: str
    message: str
    exit_status: int
    phase: str = ""  # the phase in progress (reference, target, steady state, resume, exit, ...)
    log: str | None = None  # where the details (a traceback) are
    traceback: str | None = None  # the user's traceback for a failure inside their workload
    finding: bool = False  # True: the target failed where the reference ran (a no-go), not a stopped run
