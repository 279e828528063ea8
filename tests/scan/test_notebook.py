"""Notebooks are scanned cell by cell; `--fix` rewrites only the cells it changes and keeps the rest of the JSON."""

import json

from torchferry.scan.rewrite import ACCELERATOR
from torchferry.status import ExitStatus


def _notebook(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n", "Uses `x.cuda()` in prose only.\n"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["setup"]}, "outputs": [],
         "source": ["%matplotlib inline\n", "import torch\n", "!nvidia-smi\n"]},
        {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": [{"output_type": "stream",
         "name": "stdout", "text": ["ok\n"]}],
         "source": ["x = torch.ones(2)  # data\n", "x = x.cuda()\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "%%bash\necho .cuda()\n"},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": ["def broken(:\n"]},
    ]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(notebook, indent=1))
    return path


def test_findings_carry_the_cell_index_and_the_line_within_the_cell(tmp_path, ferry):
    path = _notebook(tmp_path)
    result = ferry("scan", str(path), "--format", "json", "--fail-on", "never")
    findings = [(f["rule_id"], f["cell"], f["line"], f["column"]) for f in result.json["findings"]]
    assert findings == [("TF001", 2, 2, 7)]
    assert result.json["files"][0]["error"] == "cell 4: cannot parse: Syntax Error @ 1:1."


def test_fix_rewrites_only_the_changed_cell_and_keeps_magics_outputs_and_metadata(tmp_path, ferry):
    path = _notebook(tmp_path)
    before = json.loads(path.read_text())
    ferry("scan", str(path), "--fix")
    after = json.loads(path.read_text())
    assert after["cells"][2]["source"][-1] == f"x = x.to({ACCELERATOR})\n"
    assert after["cells"][2]["source"][0] == "x = torch.ones(2)  # data\n"
    assert after["cells"][2]["outputs"] == before["cells"][2]["outputs"]
    for index in (0, 1, 3, 4):
        assert after["cells"][index] == before["cells"][index]
    assert after["metadata"] == before["metadata"]


def test_an_unparseable_cell_makes_the_scan_negative(tmp_path, ferry):
    result = ferry("scan", str(_notebook(tmp_path)), "--fail-on", "never")
    assert result.exit_status == ExitStatus.SUCCESS  # --fail-on never: only usage errors fail
    result = ferry("scan", str(_notebook(tmp_path)), "--fail-on", "error", "--fix")
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT
    assert "cell 4: cannot parse" in result.stderr
