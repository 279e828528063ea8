"""The cost figures derived from measured throughput and the price table (the table itself: tests/harness)."""

import dataclasses

import pytest
from checkcfg import make_config

from torchferry.check import cost, timing
from torchferry.check.config import CostInputs
from torchferry.harness.prices import load_prices


def _timings(ref_tput_s: float, tgt_tput_s: float):
    ref = timing.device_timing("cpu", {"units_per_step": 1000, "unit": "tokens", "flops_per_step": 1e12}, [[1000 / ref_tput_s]])
    tgt = timing.device_timing("neuron", {"units_per_step": 1000, "unit": "tokens", "flops_per_step": 1e12}, [[1000 / tgt_tput_s]])
    return timing.summarise(ref, tgt)


CFG = CostInputs(prices=None, dtype="bfloat16", eng_hours=10, eng_rate=100, volume=1e9, ref_instance="g6e.xlarge",
                 target_instance="trn2.48xlarge")


def test_cost_per_million_tokens_utilisation_and_break_even():
    result = cost.estimate(_timings(1000, 4000), CFG, load_prices())
    ref_row, tgt_row = result.devices
    assert ref_row["cost_per_unit"] == pytest.approx(1.861 / (1000 * 3600) * 1e6)
    assert tgt_row["instance"] == "trn2.48xlarge"
    assert tgt_row["cost_per_unit"] == pytest.approx(35.76 / 64 / (4000 * 3600) * 1e6)
    assert tgt_row["utilisation"] == pytest.approx(4e12 / (10.7e15 / 64))
    assert result.break_even["status"] == "reached"
    saving = (ref_row["cost_per_unit"] - tgt_row["cost_per_unit"]) / 1e6
    assert result.break_even["units"] == pytest.approx(1000 / saving)
    assert any("no published on-demand price" in a.lower() for a in result.assumptions)
    assert any("40" not in a and "10 h x $100/h" in a for a in result.assumptions)


def test_unpriced_device_is_stated_not_guessed():
    result = cost.estimate(_timings(1000, 1000), dataclasses.replace(CFG, ref_instance=None), load_prices())
    assert result.devices[0]["cost_per_unit"] is None
    assert result.break_even["status"].startswith("not computed")
    assert any("--ref-instance" in a for a in result.assumptions)


def test_instances_default_by_device_type_once_in_the_config(tmp_path):
    cfg = make_config(tmp_path, "--target", "neuron", "--ref-instance", "g6e.xlarge")
    assert (cfg.cost.ref_instance, cfg.cost.target_instance) == ("g6e.xlarge", "trn2.48xlarge")
