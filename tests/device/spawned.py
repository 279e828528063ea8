"""Cases of a multi-process test module run in one set of worker processes, started once per module.

Most of a small multi-process run's time is the workers' start-up (the interpreter, torch, transformers, the
process group), not the case itself. A module whose cases need no process isolation from one another starts
its workers once per set of cases: the workers run the cases in turn and save each case's result as soon as
they have it, and each test loads its own. A case that fails, or a failure that stops the workers, fails the
tests of the cases left without a result, with the workers' error as the cause; the cases saved before it
still pass.

A module of its own (not conftest) so that test files import it by a unique name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch


class Spawned:
    """Per-case results of worker runs started at most once per key (say, a world size)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._factory = tmp_path_factory
        self._runs: dict[str, tuple[Path, BaseException | None]] = {}

    def result(self, key: str, case: str, start: Callable[[Path], None]) -> dict:
        """The result the workers saved as ``<folder>/<case>.pt``; ``start(folder)`` runs them on first use of ``key``."""
        if key not in self._runs:
            folder = self._factory.mktemp(key)
            try:
                start(folder)
                self._runs[key] = (folder, None)
            except Exception as exc:  # noqa: BLE001 - the cause of the failures of the cases left without a result
                self._runs[key] = (folder, exc)
        folder, error = self._runs[key]
        path = folder / f"{case}.pt"
        if not path.is_file():
            raise AssertionError(f"case {case!r}: the workers of {key!r} left no result") from error
        return torch.load(path)
