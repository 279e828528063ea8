"""The terminal a command runs in, injectable so that tests drive the CLI in-process."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Environment:
    """Streams and terminal facts; tests pass their own to capture output or fake a TTY."""

    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    stdout_isatty: bool | None = None
    colors: bool | None = None

    def __post_init__(self) -> None:
        if self.stdout_isatty is None:
            self.stdout_isatty = bool(getattr(self.stdout, "isatty", lambda: False)())
        if self.colors is None:
            self.colors = self.stdout_isatty and "NO_COLOR" not in os.environ

    def out(self, text: str = "") -> None:
        print(text, file=self.stdout, flush=True)

    def err(self, text: str = "") -> None:
        print(text, file=self.stderr, flush=True)
