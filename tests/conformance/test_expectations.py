"""The expected-failure list: valid, strict, and the architecture doc generated from it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conformance_expectations as expectations

pytestmark = pytest.mark.slow  # OpInfo/ModuleInfo sweeps over the built-in device

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_conformance_doc", ROOT / "tools" / "gen_conformance_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_list_is_valid() -> None:
    groups = expectations.load()
    assert all(g.kind in expectations.KINDS for g in groups)


def test_architecture_doc_section_is_generated_from_the_list() -> None:
    gen = _generator()
    text = gen.DOC.read_text(encoding="utf-8")
    assert gen.BEGIN in text and gen.END in text, "run: python tools/gen_conformance_doc.py"
    assert gen.updated(text, gen.render(expectations.load())) == text, \
        "docs/device/architecture.md is stale: run python tools/gen_conformance_doc.py"


def _write(tmp_path: Path, groups: list[dict]) -> Path:
    path = tmp_path / "expected_failures.json"
    path.write_text(json.dumps({"version": 1, "expected_failures": groups}), encoding="utf-8")
    return path


GOOD = {"kind": "device defect", "difference": "d", "note": "open: issue 1", "source": "issue 1",
        "tests": ["test_out_add_neuron_float32"]}


@pytest.mark.parametrize(("change", "message"), [
    ({"kind": "flaky"}, "kind 'flaky'; valid kinds: target behaviour, cpu-only assumption, device defect"),
    ({"note": "fix later"}, "starts with 'open:'"),
    ({"source": ""}, "source missing or empty"),
])
def test_a_malformed_group_is_refused_with_the_fix(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(expectations.ExpectationsError, match=message.replace("(", r"\(")):
        expectations.load(_write(tmp_path, [{**GOOD, **change}]))


def test_a_test_listed_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(expectations.ExpectationsError, match="already listed in expected_failures\\[0\\]"):
        expectations.load(_write(tmp_path, [GOOD, {**GOOD, "kind": "target behaviour", "note": "n"}]))


def test_generated_section_replaces_only_its_markers() -> None:
    gen = _generator()
    section = gen.render([expectations.Group("device defect", "out= on cpu accepted", "open: issue 10",
                                             "issue 10", ("test_out_wrong_device_add_neuron_float32",))])
    text = "# Title\n\nkept\n\n" + gen.BEGIN + "\nold\n" + gen.END + "\n\nafter\n"
    new = gen.updated(text, section)
    assert new.startswith("# Title\n\nkept\n\n") and new.endswith("\n\nafter\n")
    assert "| out= on cpu accepted | device defect | open: issue 10 | issue 10 | 1 tests; " \
           "`test_out_wrong_device`: add |" in new
    assert "old" not in new


STRICT_PROBE = """
def test_fixed():
    pass


def test_broken():
    assert False
"""


def test_a_listed_test_that_passes_fails_the_run(tmp_path: Path) -> None:
    """The tier's conftest marks listed tests strict: an unexpected pass is a failure."""
    tier = tmp_path / "conformance"
    tier.mkdir()
    for name in ("conftest.py", "conformance_expectations.py", "conformance_report.py"):
        (tier / name).write_text((Path(__file__).parent / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tier / "expected_failures.json").write_text(json.dumps({"version": 1, "expected_failures": [
        {**GOOD, "tests": ["test_fixed", "test_broken"]}]}), encoding="utf-8")
    (tier / "test_probe.py").write_text(STRICT_PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_CONFORMANCE")}  # no shard
    proc = subprocess.run([sys.executable, "-m", "pytest", str(tier), "-q", "-p", "no:cacheprovider", "-rA"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 failed, 1 xfailed" in proc.stdout
    assert "[XPASS(strict)]" in proc.stdout
