"""The row store: one JSON line per finished case, appended and flushed as each row finishes.

The first line records the settings that make rows comparable (devices, compile backend,
tolerance, seed); a later run with the same settings resumes, skipping the cases already
stored, and one with other settings is refused rather than mixed in. A last line cut short by
a crash is cut off when the store is opened (its case simply runs again), so the next row
starts on a line of its own and is never lost.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

from torchferry.errors import OutputError, UsageError
from torchferry.report.coverage import Category, Row
from torchferry.report.jsonreport import to_data


class Store:
    def __init__(self, path: Path, settings: dict, restart: bool = False) -> None:
        self.path, self.settings = path, settings
        self._lock = threading.Lock()
        self.rows: dict[str, Row] = {}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if restart and path.exists():
                path.unlink()
            if path.exists():
                self._repair()
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

    def _load(self) -> None:
        meta = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue  # a damaged line inside the file: its case runs again
            if item.get("kind") == "meta":
                meta = item
            elif item.get("kind") == "row":
                row = Row.from_dict(item)
                self.rows[row.key] = row
        stored = {k: v for k, v in (meta or {}).items() if k != "kind"}
        differing = sorted(k for k in set(stored) | set(self.settings) if stored.get(k) != self.settings.get(k))
        if differing:
            detail = "; ".join(f"{k}: stored {stored.get(k)!r}, now {self.settings.get(k)!r}" for k in differing)
            raise UsageError(f"the store {str(self.path)!r} holds rows measured with other settings ({detail}). "
                             "Rerun with the same settings to resume, pass --restart to discard it, or choose "
                             "another --output folder.")

    def _append(self, item: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(item, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, row: Row) -> None:
        with self._lock:
            self.rows[row.key] = row
            self._append({"kind": "row", **to_data(dataclasses.replace(row, baseline=None))})

    def forget(self, categories: set[Category]) -> int:
        """Drop rows of these categories from the done set (they run again; the new line wins on reading)."""
        with self._lock:
            drop = [k for k, r in self.rows.items() if r.category in categories]
            for k in drop:
                del self.rows[k]
        return len(drop)

    def done(self, arch: str, mode: str) -> bool:
        return f"{arch}/{mode}" in self.rows
