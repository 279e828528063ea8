"""The reporter protocol and the one atomic writer of every report, store snapshot and baseline.

A reporter turns one result model into the text of one file (``filename``); ``write_reports``
writes each of them all or nothing (temp file + ``os.replace``, parent folders created).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torchferry.errors import OutputError


class Reporter(Protocol):
    """Renders a result model into one file's text; reads nothing but the model."""

    filename: str

    def render(self, result: Any) -> str: ...


@dataclass(frozen=True)
class FileReporter:
    """A reporter from a file name and a render function."""

    filename: str
    render: Callable[[Any], str]


def write_reports(result: Any, reporters: Sequence[Reporter], folder: Path) -> list[Path]:
    """Render ``result`` with each reporter into ``folder``; an OutputError names the folder to change."""
    try:
        return [write_atomic(folder / r.filename, r.render(result)) for r in reporters]
    except OSError as exc:
        raise OutputError(f"the report could not be written to {str(folder)!r} ({exc}); pass a writable --output DIR.") from exc


def ensure_writable(folder: Path) -> None:
    """Fail before measuring anything if the report folder cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".ferry-probe-"):
            pass
    except OSError as exc:
        raise OutputError(
            f"the output folder {str(folder)!r} is not writable ({exc.strerror or exc}). Pass a writable folder with "
            "--output DIR."
        ) from exc


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder, so readers never see half a file.

    A file that is replaced keeps its permissions (``ferry scan --fix`` rewrites users' sources
    through here); a new one gets the ordinary mode under the umask.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
