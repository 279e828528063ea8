"""The row store: one JSON line per finished case, appended and flushed as each row finishes.

The first line records the settings that make rows comparable (devices, compile backend,
tolerance, seed); a later run with the same settings resumes, skipping the cases already
stored, and one with other settings is refused rather than mixed in. A line cut short by a
crash is ignored on reading, so the case it held simply runs again.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from torchferry.errors import OutputError, UsageError


class Store:
    def __init__(self, path: Path, settings: dict, restart: bool = False) -> None:
        self.path, self.settings = path, settings
        self._lock = threading.Lock()
        self.rows: dict[str, dict] = {}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if restart and path.exists():
                path.unlink()
            if path.exists():
                self._load()
            else:
                self._append({"kind": "meta", **settings})
        except OSError as exc:
            raise OutputError(f"the coverage store {str(path)!r} cannot be written ({exc.strerror or exc}). "
                              "Pass a writable folder with --output DIR.") from exc

    def _load(self) -> None:
        meta = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue  # a row cut short by a crash: the case runs again
            if item.get("kind") == "meta":
                meta = item
            elif item.get("kind") == "row":
                self.rows[f"{item['arch']}/{item['mode']}"] = {k: v for k, v in item.items() if k != "kind"}
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

    def add(self, row: dict) -> None:
        with self._lock:
            self.rows[f"{row['arch']}/{row['mode']}"] = row
            self._append({"kind": "row", **row})

    def forget(self, categories: set[str]) -> int:
        """Drop rows of these categories from the done set (they run again; the new line wins on reading)."""
        with self._lock:
            drop = [k for k, r in self.rows.items() if r["category"] in categories]
            for k in drop:
                del self.rows[k]
        return len(drop)

    def done(self, arch: str, mode: str) -> bool:
        return f"{arch}/{mode}" in self.rows
