"""The script's folder between its runs: each run starts from the files the user had.

The reference, the target and the noise run execute one command in one folder, so what one run writes is there for
the next: a script that resumes from its own checkpoint when one exists (``if os.path.exists("ckpt.pt")``, the
preemptible-job pattern) resumed the target from the reference's checkpoint, one step from the end, a false NO-GO;
Hugging Face's example scripts refuse an output folder that is not empty. After each run, what it wrote is moved to
``work/<role>-files/`` and the user's files it overwrote are put back (the recorder copied them first, to
``work/overwritten/``); at the end the target's files go back where the script wrote them.

What a run wrote is known from its records: the checkpoints it saved (torch.save, safetensors, save_pretrained), and
the folders it created to hold them in the script's folder (a top-level entry absent at the start). Other files a
script writes (logs, plots) stay where they are.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from torchferry.check import exit as exit_mod
from torchferry.check.script.record import ScriptRecord


class ScriptFolder:
    """The script's working folder, as the user had it when the check started, and each run's files set aside."""

    def __init__(self, cwd: Path, workdir: Path) -> None:
        self.cwd, self.workdir = cwd.resolve(), workdir.resolve()
        self.found = set(os.listdir(self.cwd))  # its top-level entries at the start: the user's
        self.aside: dict[str, dict[Path, Path]] = {}  # role -> {where the run wrote: where that lies now}

    def written(self, records: list[ScriptRecord]) -> list[Path]:
        """What a run wrote, outermost first: each checkpoint, or the top-level folder of the script's folder that the
        run created to hold it; never the check's own output folder."""
        roots: set[Path] = set()
        for item in exit_mod.checkpoints([w for r in records for w in r.checkpoints]):
            path = Path(item["path"]).resolve()
            if path == self.workdir or self.workdir in path.parents:
                continue
            if self.cwd in path.parents:
                top = self.cwd / path.relative_to(self.cwd).parts[0]
                path = path if top.name in self.found else top
            roots.add(path)
        return [p for p in sorted(roots) if not any(other in p.parents for other in roots)]

    def set_aside(self, role: str, records: list[ScriptRecord]) -> dict[Path, Path]:
        """Move what the ``role`` run wrote to ``work/<role>-files/`` and put back the user's files it overwrote; the
        moved paths, from where the script wrote them to where they lie now."""
        moved: dict[Path, Path] = {}
        for path in self.written(records):
            dest = self.workdir / f"{role}-files" / str(path).lstrip("/")
            _remove(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, dest)
            moved[path] = dest
        for kept in sorted({p for r in records for p in r.kept_files}):
            original = self.workdir / "overwritten" / kept.lstrip("/")
            if original.is_file() and not Path(kept).exists():
                shutil.copy2(original, kept)  # its old mtime: still the user's for the next run's recorder
        self.aside[role] = moved
        return moved

    def where(self, role: str, path: str) -> str:
        """Where a file the ``role`` run wrote lies now (inside a folder set aside, or where it was written)."""
        target = Path(path).resolve()
        for source, dest in self.aside.get(role, {}).items():
            if target == source or source in target.parents:
                return str(dest / target.relative_to(source))
        return path

    def put_back(self, role: str) -> list[str]:
        """Move the ``role`` run's files back where the script wrote them (the user's copies, if a later run wrote the
        same paths, are already back under work/overwritten/); the paths put back."""
        back = []
        for source, dest in self.aside.pop(role, {}).items():
            if dest.exists():
                _remove(source)
                source.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(dest, source)
                back.append(str(source))
        return back


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
