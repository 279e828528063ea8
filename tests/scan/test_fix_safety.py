"""`--fix` respects protected files: read-only files are skipped unless --force, a file that cannot
be written is reported and the scan goes on, --backup keeps the original, and the exit status says
whether a safe fix was left unwritten (OUTPUT_ERROR).

Tests run as root here, where `chmod` does not stop a write, so:
- read-only is what the mode bits say (`is_read_only` reads them; `chmod 0o444` sets them);
- an unwritable file is simulated by making `os.replace` fail for that one path (monkeypatch), which
  is where a real EACCES/EROFS/EBUSY surfaces in `write_atomic`.
"""

import errno
import json
import os
import re
import stat

import pytest

from torchferry.scan import sources
from torchferry.scan.rewrite import ACCELERATOR
from torchferry.status import ExitStatus

BEFORE = "import torch\nx = t.cuda()\n"
AFTER = f"import torch\nx = t.to({ACCELERATOR})\n"


@pytest.fixture
def project(tmp_path):
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(BEFORE)
    return tmp_path


def test_read_only_is_decided_by_the_mode_bits(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("")
    path.chmod(0o444)
    assert sources.is_read_only(path)  # true for root too, whom os.access would let write
    path.chmod(0o644)
    assert not sources.is_read_only(path)


def test_a_read_only_file_is_skipped_with_a_message_and_the_others_are_fixed(project, ferry):
    (project / "b.py").chmod(0o444)
    result = ferry("scan", str(project), "--fix")
    assert (project / "b.py").read_text() == BEFORE
    assert (project / "a.py").read_text() == AFTER and (project / "c.py").read_text() == AFTER
    assert f"{project / 'b.py'}: fixes not written: read-only, not changed (--force rewrites it)" in result.stderr
    assert result.exit_status == ExitStatus.OUTPUT_ERROR  # a safe fix was left unwritten


def test_force_rewrites_a_read_only_file_and_keeps_its_mode(project, ferry):
    path = project / "b.py"
    path.chmod(0o444)
    result = ferry("scan", str(path), "--fix", "--force")
    assert path.read_text() == AFTER and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert result.exit_status == ExitStatus.SUCCESS


def test_an_unwritable_file_is_reported_and_the_scan_goes_on(project, ferry, monkeypatch):
    real_replace = os.replace

    def replace(src, dst):
        if os.fspath(dst) == str(project / "a.py"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(sources.os, "replace", replace)
    result = ferry("scan", str(project), "--fix", "--format", "json")
    assert (project / "a.py").read_text() == BEFORE
    assert (project / "b.py").read_text() == AFTER and (project / "c.py").read_text() == AFTER
    assert re.search(r"a\.py: fixes not written: cannot write it \(Permission denied\), not changed", result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in project.iterdir()) == ["a.py", "b.py", "c.py"]  # no temp file left behind
    report = result.json
    assert [f["not_written"] is not None for f in report["files"]] == [True, False, False]
    assert report["summary"]["not_written"] == 1
    assert [f["fixed"] for f in report["findings"] if f["path"].endswith("a.py")] == [False]
    assert result.exit_status == ExitStatus.OUTPUT_ERROR


def test_backup_keeps_the_original_next_to_the_fixed_file(project, ferry):
    path = project / "a.py"
    result = ferry("scan", str(path), "--fix", "--backup")
    assert path.read_text() == AFTER
    assert (project / "a.py.bak").read_text() == BEFORE
    assert result.exit_status == ExitStatus.SUCCESS


def test_backup_never_replaces_an_existing_backup(project, ferry):
    (project / "a.py.bak").write_text("an older original\n")
    result = ferry("scan", str(project / "a.py"), "--fix", "--backup")
    assert (project / "a.py").read_text() == BEFORE
    assert (project / "a.py.bak").read_text() == "an older original\n"
    assert "a.py.bak already exists" in result.stderr
    assert result.exit_status == ExitStatus.OUTPUT_ERROR


def test_a_backup_is_removed_when_the_rewrite_fails(project, ferry, monkeypatch):
    def replace(src, dst):
        raise OSError(errno.EROFS, "Read-only file system", os.fspath(dst))

    monkeypatch.setattr(sources.os, "replace", replace)
    result = ferry("scan", str(project / "a.py"), "--fix", "--backup")
    assert (project / "a.py").read_text() == BEFORE and not (project / "a.py.bak").exists()
    assert "Read-only file system" in result.stderr


def test_a_read_only_notebook_is_skipped_too(tmp_path, ferry):
    path = tmp_path / "nb.ipynb"
    notebook = {"cells": [{"cell_type": "code", "source": ["import torch\n", "x = t.cuda()\n"], "metadata": {},
                           "outputs": [], "execution_count": None}], "metadata": {}, "nbformat": 4,
                "nbformat_minor": 5}
    path.write_text(json.dumps(notebook))
    path.chmod(0o444)
    result = ferry("scan", str(path), "--fix")
    assert json.loads(path.read_text()) == notebook
    assert "fixes not written: read-only" in result.stderr and result.exit_status == ExitStatus.OUTPUT_ERROR


def test_a_read_only_file_with_nothing_to_fix_is_not_reported(project, ferry):
    (project / "b.py").write_text("import torch\nx = t.to('cpu')\n")
    (project / "b.py").chmod(0o444)
    result = ferry("scan", str(project), "--fix")
    assert "not written" not in result.stderr and result.exit_status == ExitStatus.SUCCESS


@pytest.mark.parametrize("flag", ["--force", "--backup"])
def test_force_and_backup_need_fix(project, ferry, flag):
    result = ferry("scan", str(project), flag)
    assert result.exit_status == ExitStatus.USAGE and "--fix" in result.stderr
    assert (project / "a.py").read_text() == BEFORE


def test_every_report_format_names_the_unwritten_file(project, ferry, tmp_path_factory):
    (project / "b.py").chmod(0o444)
    text = ferry("scan", str(project), "--fix")
    assert f"{project / 'b.py'}\n  fixes not written: read-only" in text.stdout
    assert "fixes not written to 1 file" in text.stdout
    (project / "a.py").write_text(BEFORE)  # the first run fixed it
    out = tmp_path_factory.mktemp("report") / "scan.sarif"
    ferry("scan", str(project), "--fix", "--format", "sarif", "-o", str(out))
    notes = json.loads(out.read_text())["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert [(n["level"], n["message"]["text"].split(":")[0]) for n in notes] == [("warning", "fixes not written")]
    assert notes[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("b.py")
