"""`ferry scan` exit codes and argument handling, driven in-process through `torchferry.cli.main`."""

import json
import re

import pytest

from torchferry.cli import COMMANDS
from torchferry.status import ExitStatus


@pytest.fixture
def files(tmp_path):
    (tmp_path / "error.py").write_text("import torch\nx = t.cuda()\n")
    (tmp_path / "warning.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "info.py").write_text("import torch\ntorch.backends.cudnn.benchmark = True\n")
    (tmp_path / "clean.py").write_text("import torch\nx = torch.ones(2)\n")
    return tmp_path


def test_scan_is_a_registered_command():
    assert COMMANDS["scan"][0] == "torchferry.scan.command"


@pytest.mark.parametrize(("name", "fail_on", "status"), [
    ("error.py", "error", ExitStatus.NEGATIVE_RESULT),
    ("warning.py", "error", ExitStatus.SUCCESS),
    ("warning.py", "warning", ExitStatus.NEGATIVE_RESULT),
    ("info.py", "warning", ExitStatus.SUCCESS),
    ("info.py", "info", ExitStatus.NEGATIVE_RESULT),
    ("error.py", "never", ExitStatus.SUCCESS),
    ("clean.py", "info", ExitStatus.SUCCESS),
])
def test_exit_status_follows_fail_on(files, ferry, name, fail_on, status):
    assert ferry("scan", str(files / name), "--fail-on", fail_on).exit_status == status


def test_select_runs_only_the_named_rules_and_refuses_an_unknown_id(files, ferry, tmp_path):
    both = tmp_path / "both.py"
    both.write_text("import torch\nx = t.cuda()\ntorch.cuda.synchronize()\n")
    everything = ferry("scan", str(both), "--format", "json")
    selected = ferry("scan", str(both), "--format", "json", "--select", "tf001")
    every_id = {f["rule_id"] for f in json.loads(everything.stdout)["findings"]}
    assert len(every_id) >= 2 and "TF001" in every_id  # the file trips more rules than the one selected
    report = json.loads(selected.stdout)
    assert {f["rule_id"] for f in report["findings"]} == {"TF001"} and [r["id"] for r in report["rules"]] == ["TF001"]
    refused = ferry("scan", str(both), "--select", "TF001,TF999")
    assert refused.exit_status == ExitStatus.USAGE and "TF999 names no rule" in refused.stderr
    assert "TF028" in refused.stderr  # the valid ids are listed


def test_clean_code_reports_no_findings(files, ferry):
    result = ferry("scan", str(files / "clean.py"))
    assert result.stdout.strip() == "0 findings (0 error, 0 warning, 0 info) in 1 file."


def test_missing_path_is_a_usage_error_naming_it(files, ferry):
    result = ferry("scan", str(files / "clean.py"), str(files / "nope.py"))
    assert result.exit_status == ExitStatus.USAGE
    assert "nope.py" in result.stderr


@pytest.mark.parametrize("argv", [["--format", "xml"], ["--fail-on", "fatal"], []])
def test_bad_arguments_are_usage_errors(files, ferry, argv):
    paths = [str(files / "clean.py")] if argv else []
    assert ferry("scan", *paths, *argv).exit_status == ExitStatus.USAGE


def test_diff_and_a_machine_format_cannot_share_stdout(files, ferry):
    result = ferry("scan", str(files / "error.py"), "--diff", "--format", "json")
    assert result.exit_status == ExitStatus.USAGE and "--output" in result.stderr


def test_unwritable_report_path_is_an_output_error(files, ferry):
    (files / "blocker").write_text("")
    result = ferry("scan", str(files / "clean.py"), "--format", "json", "-o", str(files / "blocker" / "r.json"))
    assert result.exit_status == ExitStatus.OUTPUT_ERROR and "--output" in result.stderr


@pytest.mark.parametrize("argv", [
    ["nope.py"],  # a missing path
    ["clean.py", "--diff", "--format", "json"],  # two outputs on stdout
    ["clean.py", "--format", "json", "-o", "blocker/r.json"],  # an unwritable report path
])
def test_errors_carry_one_prefix(files, ferry, argv, monkeypatch):
    monkeypatch.chdir(files)
    (files / "blocker").write_text("")
    result = ferry("scan", *argv)
    assert result.exit_status != ExitStatus.SUCCESS
    line = result.stderr.strip().splitlines()[-1]
    assert re.match(r"ferry( scan)?: ", line) and not re.search(r"ferry( scan)?: ferry", line), line
