"""What cannot be a source is skipped with a note and never opened as one; an empty result says why."""

from __future__ import annotations

import os

import pytest
from ferryrun import ferry

from torchferry.status import ExitStatus


def test_a_character_device_is_skipped_and_the_empty_result_says_why():
    code, out, err = ferry("scan", "/dev/zero")  # reading it would never end
    assert code == ExitStatus.SUCCESS
    assert "ferry scan: /dev/zero: a character device, not a file; skipped" in err
    assert "nothing to scan: no Python file or notebook under /dev/zero (1 skipped, above)" in err


@pytest.mark.timeout(60)  # opening a FIFO waits for a writer: a hang here is the bug
def test_fifos_and_binary_files_are_skipped_and_the_source_beside_them_is_scanned(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "blob.py").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    (tmp_path / "train.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    code, out, err = ferry("scan", str(tmp_path), "--fail-on", "never")
    assert code == ExitStatus.SUCCESS, err
    assert f"{tmp_path / 'pipe.py'}: a FIFO (named pipe), not a file; skipped" in err
    assert f"{tmp_path / 'blob.py'}: a binary file (NUL bytes), not Python source or a notebook; skipped" in err
    assert "in 1 files" in out


def test_a_folder_without_sources_says_what_is_scanned(tmp_path):
    (tmp_path / "notes.txt").write_text("no python here")
    code, out, err = ferry("scan", str(tmp_path))
    assert code == ExitStatus.SUCCESS
    assert f"nothing to scan: no Python file or notebook under {tmp_path} (scanned: .py and .ipynb files" in err
