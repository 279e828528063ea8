"""The row store: one JSON line per finished case, appended and flushed as each row finishes.

The first line records the settings that make rows comparable (devices, compile backend,
tolerance, seed, plugins) and the environment they were measured in (package versions and the
built-in device's result-changing knobs); a later run with the same settings resumes, skipping
the cases already stored, and one with other settings is refused rather than mixed in. Each run
then appends a ``run`` line: the architectures selected, the modes, and for ``--shard K/N`` the
shard and the architectures it was assigned (what ``ferry coverage merge`` checks). A last line
cut short by a crash is cut off when the store is opened (its case simply runs again), so the
next row starts on a line of its own and is never lost.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from torchferry.errors import OutputError, UsageError
from torchferry.report.coverage import Category, Row
from torchferry.report.core import write_atomic
from torchferry.report.jsonreport import to_data


def differences(stored: dict, now: dict, labels: tuple[str, str] = ("stored", "now"), prefix: str = "") -> list[str]:
    """``key: stored X, now Y`` for every setting that differs (nested dicts by their own keys)."""
    out = []
    for k in sorted(set(stored) | set(now)):
        a, b = stored.get(k), now.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, labels, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {labels[0]} {a!r}, {labels[1]} {b!r}")
    return out


@dataclass
class Contents:
    """What a store file holds: its settings line, its run lines and its rows (the last line of a case wins)."""

    settings: dict | None = None
    runs: list[dict] = field(default_factory=list)
    rows: dict[str, Row] = field(default_factory=dict)
    good: list[str] = field(default_factory=list)  # the lines that parsed, in order
    corrupt: list[tuple[int, str]] = field(default_factory=list)  # (line number, what is wrong with it)


def read(path: Path) -> Contents:
    """A store's contents, without changing it; lines that are not a store line are listed in ``corrupt``."""
    found = Contents()
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            item = json.loads(line)
            kind = item.pop("kind", None) if isinstance(item, dict) else None
            if kind == "meta":
                found.settings = item
            elif kind == "run":
                found.runs.append(item)
            elif kind == "row":
                row = Row.from_dict(item)
                found.rows[row.case] = row
            else:
                raise ValueError(f"not a meta, run or row line: {line[:60]!r}")
        except (ValueError, TypeError, KeyError) as exc:  # JSONDecodeError is a ValueError
            found.corrupt.append((number, f"{type(exc).__name__}: {str(exc)[:100]}"))
            continue
        found.good.append(line)
    return found


class Store:
    """``repair``: drop corrupt lines and keep the good rows (else a store with one is refused, the line named);
    ``repaired`` then says what was dropped."""

    def __init__(self, path: Path, settings: dict, restart: bool = False, repair: bool = False) -> None:
        self.path, self.settings = path, settings
        self._lock = threading.Lock()
        self.rows: dict[str, Row] = {}
        self.repaired: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if restart and path.exists():
                path.unlink()
            if path.exists():
                self._repair()
                self._drop_corrupt(repair)
                self._load()
            else:
                self._append({"kind": "meta", **settings})
        except OSError as exc:
            raise OutputError(f"the coverage store {str(path)!r} cannot be written ({exc.strerror or exc}). "
                              "Pass a writable folder with --output DIR.") from exc

    def _repair(self) -> None:
        """Cut a torn last line (no newline: a crash in the middle of a write) off the file."""
        with open(self.path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def _drop_corrupt(self, repair: bool) -> None:
        """Refuse a store with corrupt lines, naming them; with ``repair``, rewrite it with the good lines only."""
        found = read(self.path)
        if not found.corrupt:
            return
        lines = "; ".join(f"line {n}: {why}" for n, why in found.corrupt[:3]) + (
            f"; and {len(found.corrupt) - 3} more" if len(found.corrupt) > 3 else "")
        if not repair:
            raise UsageError(f"the store {str(self.path)!r} has {len(found.corrupt)} corrupt line(s) ({lines}). Pass "
                             f"--repair to drop them and keep its {len(found.rows)} good rows (the cases of the dropped "
                             "lines run again), or --restart to discard the whole store.")
        good = found.good
        if found.settings is None:  # the settings line itself was lost: the rows are taken as this run's settings
            good = [json.dumps({"kind": "meta", **self.settings}, default=str), *good]
        write_atomic(self.path, "".join(line + "\n" for line in good))
        self.repaired = (f"repaired {str(self.path)!r}: dropped {len(found.corrupt)} corrupt line(s) ({lines}); kept "
                         f"{len(found.rows)} rows" + ("; its settings line was among them, so its rows are taken as "
                                                      "measured with this run's settings" if found.settings is None else ""))

    def _load(self) -> None:
        found = read(self.path)
        self.rows = found.rows
        differing = differences(found.settings or {}, self.settings)
        if differing:
            raise UsageError(f"the store {str(self.path)!r} holds rows measured with other settings "
                             f"({'; '.join(differing)}). Rerun with the same settings to resume, pass --restart "
                             "to discard it, or choose another --output folder.")

    def begin(self, selection: dict) -> None:
        """Record what this run measures (a ``run`` line: architectures, modes, shard)."""
        self._append({"kind": "run", **selection})

    def _append(self, item: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(item, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, row: Row) -> None:
        with self._lock:
            self.rows[row.case] = row
            self._append({"kind": "row", **to_data(dataclasses.replace(row, baseline=None))})

    def forget(self, categories: set[Category]) -> int:
        """Drop rows of these categories from the done set (they run again; the new line wins on reading)."""
        with self._lock:
            drop = [k for k, r in self.rows.items() if r.category in categories]
            for k in drop:
                del self.rows[k]
        return len(drop)

    def done(self, case: str) -> bool:
        """Whether the case ``suite/arch/mode`` (``Row.case``) has a stored row."""
        return case in self.rows
