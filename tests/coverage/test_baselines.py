"""The shipped coverage baselines are what the rules of this checkout measure: a device rule that changes a shipped
row's category (a host fallback, a dtype rule, a kernel) fails here until the baseline is regenerated with it
(`python tools/coverage_baselines.py`, docs/coverage.md, Baselines), so a baseline never goes stale unnoticed."""

import importlib.util
from pathlib import Path

import pytest

from torchferry.report.coverage import Category

TOOL = Path(__file__).parents[2] / "tools" / "coverage_baselines.py"


def _tool():
    spec = importlib.util.spec_from_file_location("coverage_baselines", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # every suite swept on the built-in device, two architectures at a time: minutes on 2 cores
@pytest.mark.timeout(3600)
def test_every_shipped_row_is_what_the_current_rules_measure(capsys):
    status = _tool().main(["--check"])
    assert status == 0, capsys.readouterr().err  # the differing rows, and the command that regenerates the files


def test_the_check_names_a_row_whose_category_changed(tmp_path, monkeypatch):
    """The gate itself, without a sweep: a stored sweep whose row differs from the shipped file is named."""
    import json

    tool = _tool()
    baseline = tmp_path / "neuron.json"
    baseline.write_text(json.dumps({"format_version": 2, "rows": {"vision/resnet/forward": "pass",
                                                                  "vision/vit/forward": "pass"}}))
    (tmp_path / "vision").mkdir()
    (tmp_path / "vision" / "coverage.json").write_text(json.dumps({"rows": [
        {"suite": "vision", "arch": "resnet", "mode": "forward", "category": str(Category.FAIL_FALLBACK)},
        {"suite": "vision", "arch": "convnext", "mode": "forward", "category": str(Category.PASS)}]}))
    monkeypatch.setattr("torchferry.coverage.config.baseline_path", lambda suite, device, method: baseline)
    assert tool.changed("vision", tmp_path) == ["vision/resnet/forward: shipped pass, measured fail-fallback",
                                                "vision/convnext/forward: not in the shipped baseline (measured pass)",
                                                "vision/vit/forward: in the shipped baseline, not measured"]
