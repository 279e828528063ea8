"""The three renderings of one scan: terminal text grouped by file, versioned JSON, SARIF 2.1.0."""

import json

import pytest

from torchferry.report.scan import FORMAT_VERSION
from torchferry.scan.rules import RULES


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import torch\nx = t.cuda()\ntorch.backends.cudnn.benchmark = True\n")
    (tmp_path / "pkg" / "b.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "pkg" / "clean.py").write_text("import torch\nx = torch.ones(2)\n")
    (tmp_path / "pkg" / ".venv").mkdir()
    (tmp_path / "pkg" / ".venv" / "skipped.py").write_text("x.cuda()\n")
    return tmp_path


def test_text_report_groups_findings_by_file_with_their_fixes(project, ferry):
    out = ferry("scan", "pkg").stdout
    assert out.splitlines()[:5] == [
        "pkg/a.py",
        "  2:7  error  TF001  `.cuda()` moves data to a CUDA device by name; it fails on any other accelerator. "
        "[fixable: --fix]",
        "      fix: `.to(torch.accelerator.current_accelerator())`",
        "  3:1  info  TF012  `torch.backends.cudnn.benchmark` is read by cuDNN/cuBLAS only; it has no effect on "
        "another accelerator.",
        "      fix: use device-neutral settings: `torch.use_deterministic_algorithms(...)`, "
        "`torch.set_float32_matmul_precision(...)`",
    ]
    assert "pkg/b.py" in out and "clean.py" not in out and "skipped.py" not in out
    assert out.rstrip().endswith("3 findings (1 error, 1 warning, 1 info) in 3 files; 2 fixable with --fix.")


def test_json_report_is_versioned_and_lists_every_finding(project, ferry):
    report = ferry("scan", "pkg", "--format", "json").json
    assert report["meta"]["format"] == "torchferry.scan" and report["meta"]["format_version"] == FORMAT_VERSION
    assert report["meta"]["command"] == "ferry scan pkg --format json" and report["meta"]["created"]
    assert report["summary"]["fixes_applied"] is False
    assert [r["id"] for r in report["rules"]] == [r.id for r in RULES]
    symptoms = {r["id"]: r["symptom"] for r in report["rules"]}  # what `ferry check` matches a failure against
    assert symptoms.pop("TF006") == "No backend type associated with device type" and set(symptoms.values()) == {None}
    assert [(f["path"], f["line"], f["rule_id"]) for f in report["findings"]] == [
        ("pkg/a.py", 2, "TF001"), ("pkg/a.py", 3, "TF012"), ("pkg/b.py", 2, "TF003")]
    assert report["summary"]["open"] == {"info": 1, "warning": 1, "error": 1}


def test_report_file_is_written_whole_and_announced(project, ferry):
    result = ferry("scan", "pkg", "--format", "json", "--output", "out/scan.json")
    assert json.loads((project / "out" / "scan.json").read_text())["meta"]["format_version"] == FORMAT_VERSION
    assert result.stdout == "" and "report written to out/scan.json" in result.stderr
    assert [p.name for p in (project / "out").iterdir()] == ["scan.json"]  # no temp file left behind


def test_sarif_report_has_the_structure_code_hosts_read(project, ferry):
    sarif = ferry("scan", "pkg", "--format", "sarif").json
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    (run,) = sarif["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "torchferry"
    assert [r["id"] for r in rules] == [r.id for r in RULES]
    assert all(r["shortDescription"]["text"] and r["defaultConfiguration"]["level"] in ("error", "warning", "note")
               for r in rules)
    results = run["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("TF001", "error"), ("TF012", "note"), ("TF003", "warning")]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"].startswith("pkg/")
        assert location["region"]["startLine"] >= 1 and location["region"]["startColumn"] >= 1
        assert result["message"]["text"]


def test_sarif_reports_unparseable_files_as_notifications_and_omits_fixed_findings(project, ferry):
    (project / "pkg" / "bad.py").write_text("def (\n")
    sarif = ferry("scan", "pkg", "--format", "sarif", "--fix").json
    (notification,) = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "pkg/bad.py"
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["TF012"]


def test_json_and_sarif_carry_the_branch_only_cuda_takes(tmp_path, ferry):
    (tmp_path / "train.py").write_text('import torch\nif device.type == "cuda":\n    model.cuda()\nnet.cuda()\n')
    guard = {"line": 2, "test": 'device.type == "cuda"', "decided_by": "device", "flags": [], "options": [],
             "fallback_line": None}
    findings = ferry("scan", str(tmp_path / "train.py"), "--format", "json").json["findings"]
    assert [(f["line"], f["rule_id"], f["severity"], f["guard"]) for f in findings] == [
        (2, "TF002", "info", None), (3, "TF001", "info", guard), (4, "TF001", "error", None)]
    results = ferry("scan", str(tmp_path / "train.py"), "--format", "sarif").json["runs"][0]["results"]
    assert [r.get("properties") for r in results] == [None, {"guard": guard}, None]
