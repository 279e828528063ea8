"""The layering contracts (.importlinter) hold: cli -> commands -> harness core -> report -> device."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.skipif(shutil.which("lint-imports") is None,
                    reason="import-linter is not installed (pip install -e '.[test]' installs it)")
def test_lint_imports_passes():
    proc = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout
