"""Hostile values are refused before any worker starts, each with one line naming the value and the valid ones
(docs/check/errors.md, hostile input)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkrun import FAST, run_check
from ferryrun import ferry

from torchferry.status import ExitStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args, expected", [
    (["--lr", "nan"], "--lr must be a finite number greater than 0 (got nan)"),
    (["--timeout", "inf"], "--timeout must be a finite number greater than 0 (got inf)"),
    (["--tol", "-1"], "--tol must be a finite number greater than 0 (got -1)"),
    (["--volume", "nan"], "--volume must be a finite number greater than 0 (got nan)"),
    (["--eng-rate", "-5"], "--eng-rate must be a finite number at least 0 (got -5)"),
    (["--steady-budget", "nan"], "--steady-budget must be a finite number at least 0 (got nan). 0 adds no rounds."),
    (["--seed", "-1"], "--seed must be a whole number at least 0 and at most 9223372036854775807 (got -1)"),
    (["--steps", "0"], "--steps must be a whole number at least 1 (got 0)"),
])
def test_a_bad_number_is_refused_before_any_worker(tmp_path, args, expected):
    result = run_check(["--target", "cpu", *FAST, *args], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert result.stderr.strip() == f"ferry check: {expected}" + ("" if expected.endswith(".") else ".")  # one line
    assert not (tmp_path / "report" / "work").exists()


@pytest.mark.parametrize("price", ["nan", "inf", "-inf"])
def test_a_price_that_is_not_finite_is_refused(tmp_path, price):
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[instances."my-box"]\nprice_per_hour = {price}\ndate = "2026-01-01"\nsource = "invoice"\n')
    result = run_check(["--target", "cpu", "--prices", str(prices), *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert f"price_per_hour = {price}" in result.stderr and "positive, finite number" in result.stderr
    assert not (tmp_path / "report" / "work").exists()


def test_a_peak_or_bandwidth_that_is_not_finite_is_refused(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[instances."my-box"]\nprice_per_hour = 2.0\ndate = "2026-01-01"\nsource = "invoice"\n'
                      'hbm_bandwidth = nan\n')
    result = run_check(["--target", "cpu", "--prices", str(prices), *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE and "hbm_bandwidth = nan" in result.stderr


@pytest.mark.parametrize("variable, value, expected", [
    ("TORCHFERRY_DEVICE", "nueron", "TORCHFERRY_DEVICE='nueron' is not a device torchferry provides. Valid values: neuron"),
    ("TORCHFERRY_DEVICE_MEMORY", "lots", "TORCHFERRY_DEVICE_MEMORY='lots' is not a positive memory size"),
    ("TORCHFERRY_FALLBACK", "loud", "TORCHFERRY_FALLBACK='loud' is not a fallback mode. Valid values: warn, silent, error"),
    ("NEURON_RT_VISIBLE_CORES", "3-1", "NEURON_RT_VISIBLE_CORES='3-1' is not a core list"),
    ("TORCHFERRY_PROFILE", "trn9", "device profile 'trn9' not found. Shipped profiles: trn2"),
])
def test_a_bad_device_variable_is_one_line_and_exit_2_in_every_command(monkeypatch, tmp_path, variable, value, expected):
    monkeypatch.setenv(variable, value)
    for command in (["check", "--target", "cpu", "-o", str(tmp_path / "r")], ["scan", str(tmp_path)],
                    ["plan", "--size", "1b", "-o", str(tmp_path / "p")]):
        code, out, err = ferry(*command)
        assert code == ExitStatus.USAGE, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ferry {command[0]}: ") and expected in lines[0], err
    assert not (tmp_path / "r" / "work").exists()


@pytest.mark.parametrize("env, expected", [
    ({"TORCHFERRY_DEVICE": "nueron"}, "torchferry: TORCHFERRY_DEVICE='nueron' is not a device torchferry provides. "
                                      "Valid values: neuron; or unset it to leave `import torch` unchanged."),
    ({"TORCHFERRY_DEVICE": "neuron", "TORCHFERRY_DEVICE_MEMORY": "lots"},
     "torchferry: TORCHFERRY_DEVICE_MEMORY='lots' is not a positive memory size"),
], ids=["typo", "bad-size"])
def test_a_bad_device_variable_under_autoload_ends_import_torch_with_one_line(env, expected):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHFERRY_", "NEURON_RT_"))}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", "import torch; print('imported')"], capture_output=True, text=True,
                          env={**environ, **env}, timeout=300)
    assert proc.returncode == 2 and "imported" not in proc.stdout
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(expected), proc.stderr


def test_a_default_batch_that_does_not_split_over_nproc_is_refused_before_the_first_step(tmp_path):
    workload = tmp_path / "three.py"
    workload.write_text(
        "import torch\n\n"
        "def build():\n"
        "    def batch(device, seed):\n"
        "        return (torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)).to(device),)\n"
        "    return torch.nn.Linear(4, 2), batch, lambda out, b: out.square().mean()\n")
    result = run_check(["--target", "cpu", "--nproc", "2", "-w", f"{workload}:build", *FAST], tmp_path / "report")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert "the batch size 3 does not split into --nproc 2 equal shards" in result.stderr
    report = result.report
    assert report["failure"]["phase"] == "reference" and report["timing"]["ref"] is None  # no step was run
    assert not (tmp_path / "report" / "work" / "target.log").exists()  # no target worker started
