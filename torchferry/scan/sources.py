"""Files in, files out: find the sources under the given paths, scan each, write fixes back.

A `.py` file is one source; a notebook is one source per code cell (magics masked so
libcst can parse the rest). A file or cell that does not parse is reported and never
rewritten; fixed files are written atomically (temp file + `os.replace`).

`os.replace` needs only a writable folder, so it would replace a read-only file too: a file
without write permission is skipped (unless `force`), and a file that cannot be written is
reported and left as it was, and the scan goes on (`FileResult.not_written` says why).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import stat
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from torchferry.errors import UsageError
from torchferry.report.core import write_atomic
from torchferry.scan.engine import RuleHit, analyse
from torchferry.report.scan import FileResult, Finding, Rule

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}
_MAGIC = "#%ferry-magic%"  # marks a masked IPython magic/shell line inside a cell
_IMPORTS_TORCH = re.compile(r"^\s*import\s+torch\b", re.MULTILINE)


def discover(paths: Sequence[str], skipped: list[str] | None = None) -> list[Path]:
    """The Python files and notebooks under `paths`, in order; a named file is scanned whatever its suffix.

    What cannot be source is never opened as such: a device, FIFO or socket (reading `/dev/zero` never ends, opening
    a FIFO waits for a writer) and a binary file (a NUL byte in its first block) are left out, each with a line in
    ``skipped`` saying what it is.
    """
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}; "
                         "pass existing .py/.ipynb files or directories.")
    notes = skipped if skipped is not None else []
    found: list[Path] = []

    def keep(path: Path) -> None:
        why = not_source(path)
        if why:
            notes.append(f"{path}: {why}; skipped")
        else:
            found.append(path)

    for given in map(Path, paths):
        if not given.is_dir():
            keep(given)
            continue
        for root, dirs, files in os.walk(given):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            for f in sorted(files):
                if f.endswith((".py", ".ipynb")):
                    keep(Path(root) / f)
    return list(dict.fromkeys(found))


BINARY_PROBE = 8192  # bytes read to tell a binary file (a NUL byte) from source text


def not_source(path: Path) -> str | None:
    """Why ``path`` cannot be a source file (a device, FIFO, socket, binary, unreadable), or None when it can."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    kinds = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a FIFO (named pipe)",
             stat.S_ISSOCK: "a socket"}
    for test, kind in kinds.items():
        if test(mode):
            return f"{kind}, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    try:
        with open(path, "rb") as f:
            head = f.read(BINARY_PROBE)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return "a binary file (NUL bytes), not Python source or a notebook" if b"\0" in head else None


def _findings(hits: Iterable[RuleHit], path: str, cell: int | None, written: bool) -> Iterator[Finding]:
    for h in hits:
        fixable = h.hit.fix is not None
        yield Finding(path=path, line=h.line, column=h.column, rule_id=h.rule.id, severity=h.rule.severity,
                      message=h.hit.message or h.rule.summary, fix=h.rule.fix, fixable=fixable,
                      cell=cell, fixed=fixable and written)


def _diff(before: str, after: str, name: str) -> str:
    old, new = (name, name) if name.startswith("/") else (f"a/{name}", f"b/{name}")  # git-style when relative
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=old, tofile=new)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


@dataclass(frozen=True)
class WritePolicy:
    """How `--fix` writes: `force` rewrites read-only files, `backup` keeps the original as `<name>.bak`."""

    force: bool = False
    backup: bool = False


BACKUP_SUFFIX = ".bak"


def is_read_only(path: Path) -> bool:
    """No write bit in the file's mode (`chmod a-w`), or not writable by this user.

    The mode bits are read as well as `os.access`, because for root `os.access` says every
    file is writable.
    """
    mode = path.stat().st_mode
    return not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK)


def write_fixed(path: Path, data: bytes, policy: WritePolicy) -> str | None:
    """Write the fixed file under `policy`; None when written, else why not (the file is unchanged)."""
    if not policy.force and is_read_only(path):
        return "read-only, not changed (--force rewrites it)"
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if policy.backup and backup.exists():
        return f"backup {backup} already exists, not changed (move it away, or drop --backup)"
    made_backup = False
    try:
        if policy.backup:
            shutil.copy2(path, backup)
            made_backup = True
        write_atomic(path, data)
    except OSError as exc:
        if made_backup:
            backup.unlink(missing_ok=True)
        return f"cannot write it ({exc.strerror or exc}), not changed"
    return None


def _parse_error(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def scan_python(path: Path, rules: Sequence[Rule], fix: bool, write: WritePolicy | None) -> FileResult:
    """Scan one Python file; with `fix`, diff the safe rewrites; with `write`, also save them."""
    name = str(path)
    result = FileResult(name)
    raw = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(iter(raw.splitlines(keepends=True)).__next__)
        text = raw.decode(encoding)
        hits, fixed = analyse(text, rules, fix)
    except (cst.ParserSyntaxError, SyntaxError, UnicodeDecodeError) as exc:
        result.error = f"cannot parse: {_parse_error(exc)}"
        return result
    if fixed is not None and fixed != text:
        result.diff = _diff(text, fixed, name)
        if write is not None:
            result.not_written = write_fixed(path, fixed.encode(encoding), write)
            result.written = result.not_written is None
    result.findings = list(_findings(hits, name, None, result.written))
    return result


def _mask_magics(code: str) -> str:
    lines = code.splitlines(keepends=True)
    out = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        out.append(indent + _MAGIC + stripped if stripped.startswith(("%", "!")) else line)
    return "".join(out)


def _unmask_magics(code: str) -> str:
    return "".join(line.replace(_MAGIC, "", 1) if line.lstrip().startswith(_MAGIC) else line
                   for line in code.splitlines(keepends=True))


def scan_notebook(path: Path, rules: Sequence[Rule], fix: bool, write: WritePolicy | None) -> FileResult:
    """Scan each code cell of a notebook; `line` counts within the cell, `cell` indexes `cells`.

    A cell that does not parse (or a cell magic such as `%%bash`) is reported and left as is;
    fixes rewrite only the `source` of the cells they change.
    """
    name = str(path)
    result = FileResult(name)
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = notebook["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        result.error = f"cannot parse notebook JSON: {_parse_error(exc)}"
        return result
    errors, diffs, changed, torch_imported = [], [], False, False
    pending: list[tuple[int, list[RuleHit], bool]] = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        code = "".join(source) if isinstance(source, list) else source
        if code.lstrip().startswith("%%"):
            continue  # a cell magic: the cell is not Python
        try:
            hits, fixed = analyse(_mask_magics(code), rules, fix, add_import=not torch_imported)
        except cst.ParserSyntaxError as exc:
            errors.append(f"cell {index}: cannot parse: {_parse_error(exc)}")
            continue
        torch_imported = torch_imported or bool(_IMPORTS_TORCH.search(code))
        fixed = _unmask_magics(fixed) if fixed is not None else None
        cell_changed = fixed is not None and fixed != code
        if cell_changed:
            diffs.append(_diff(code, fixed, f"{name}:cell[{index}]"))
            cell["source"] = fixed.splitlines(keepends=True) if isinstance(source, list) else fixed
            changed = True
        pending.append((index, hits, cell_changed))
    if changed and write is not None:
        result.not_written = write_fixed(path, (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode(),
                                         write)
        result.written = result.not_written is None
    for index, hits, cell_changed in pending:
        result.findings.extend(_findings(hits, name, index, result.written and cell_changed))
    result.error = "; ".join(errors) or None
    result.diff = "".join(diffs)
    return result


def scan_file(path: Path, rules: Sequence[Rule], fix: bool, write: WritePolicy | None) -> FileResult:
    """Scan `path` as a notebook (`.ipynb`) or as Python (anything else); `write` None = write nothing."""
    scan = scan_notebook if path.suffix == ".ipynb" else scan_python
    return scan(path, rules, fix, write)
