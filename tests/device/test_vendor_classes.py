"""tools/run_vendor_classes.py: the harness that runs PyTorch's test classes on the CPU and the device
and compares the outcomes with TorchNeuron's failing-test lists. PyTorch's test files are not here;
these tests run the harness's parts on a small device-type test file of their own."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).parents[2] / "tools"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS))  # it imports the estimator beside it, as it does when run
    spec = importlib.util.spec_from_file_location("run_vendor_classes", TOOLS / "run_vendor_classes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("name", "device", "expected"), [
    ("test_add_cpu_float32", "cpu", "test_add_neuron_float32"),
    ("test_cpu_offload_cpu", "cpu", "test_cpu_offload_neuron"),  # the last device token, not the first
    ("test_cat_cpu", "cpu", "test_cat_neuron"),
    ("test_add_neuron_float32", "neuron", "test_add_neuron_float32"),
])
def test_names_of_one_test_on_two_devices_are_matched(harness, name, device, expected):
    assert harness.as_device_name(name, device) == expected


def test_figures_count_listed_failures_and_false_alarms_among_cpu_passes(harness):
    cpu = {t: {"outcome": o, "message": ""} for t, o in [
        ("test_a_neuron_float32", "pass"), ("test_a_neuron_int8", "pass"), ("test_b_neuron", "pass"),
        ("test_c_neuron", "fail"), ("test_d_neuron", "pass"), ("test_e_neuron", "pass")]}
    device = {t: {"outcome": o, "message": m} for t, o, m in [
        ("test_a_neuron_float32", "error", "RuntimeError: x"), ("test_a_neuron_int8", "pass", ""),
        ("test_b_neuron", "pass", ""), ("test_c_neuron", "fail", "c"), ("test_d_neuron", "crash", "died"),
        ("test_e_neuron", "skip", "")]}
    listed = {"test_a_neuron_float32", "test_a_neuron_int8", "test_b_neuron", "test_c_neuron", "test_z_neuron"}
    figures = harness.compare(listed, cpu, device)
    assert (figures["listed_run_cpu_pass"], figures["reproduced"]) == (3, 1)  # c fails on the CPU: left out
    assert (figures["functions"], figures["functions_reproduced"]) == (2, 1)  # test_a and test_b
    assert figures["false_alarms"] == {"test_d_neuron": "died"}  # unlisted, passes on the CPU; e skipped
    assert figures["missed"] == ["test_a_neuron_int8", "test_b_neuron"]
    assert figures["listed_not_here"] == ["test_z_neuron"]


def test_a_worker_records_each_outcome_and_resumes_after_a_crash(tmp_path):
    (tmp_path / "test_mini.py").write_text(textwrap.dedent("""
        import os
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        class TestMini(TestCase):
            def test_add(self, device):
                self.assertEqual((torch.ones(3, device=device) + 1).cpu(), torch.full((3,), 2.0))
            def test_channels_last(self, device):
                torch.ones(2, 3, 4, 5, device=device).to(memory_format=torch.channels_last)
            def test_dies(self, device):
                os._exit(3)
            def test_skipped(self, device):
                raise AssertionError("the spec skips it")

        instantiate_device_type_tests(TestMini, globals())
    """))
    out = tmp_path / "TestMini.neuron.jsonl"
    env = {**os.environ, "PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1", "TORCHFERRY_DEVICE": "neuron",
           "PYTORCH_PRINT_REPRO_ON_FAILURE": "0"}
    command = [sys.executable, str(TOOLS / "run_vendor_classes.py"), "--worker", "--tests", str(tmp_path),
               "--file", "test_mini.py", "--class", "TestMini", "--device", "neuron", "--out", str(out),
               "--timeout", "60", "--skip", "skipped"]  # a key skips every name containing it
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert first.returncode == 3, first.stderr[-2000:]  # the worker died inside test_dies ...
    second = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert second.returncode == 0, second.stderr[-2000:]  # ... and the next one resumed after it
    outcomes = {e["test"]: e for e in map(json.loads, out.read_text().splitlines())}
    assert {t: e["outcome"] for t, e in outcomes.items()} == {
        "test_add_neuron": "pass", "test_channels_last_neuron": "error", "test_dies_neuron": "crash",
        "test_skipped_neuron": "skip"}
    assert outcomes["test_channels_last_neuron"]["message"].startswith("RuntimeError: CPU fallback disabled")
