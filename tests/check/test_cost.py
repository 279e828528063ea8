"""The price table and the cost figures derived from measured throughput."""

import pytest

import dataclasses

from checkcfg import make_config

from torchferry.check import cost, timing
from torchferry.check.config import CostInputs
from torchferry.errors import UsageError
from torchferry.harness.prices import instance_for


def test_every_shipped_price_has_a_date_and_a_source():
    table = cost.load_prices()
    assert table["instances"]
    for name, entry in table["instances"].items():
        assert entry["price_per_hour"] > 0 and entry["date"] and entry["source"], name


def test_trn2_says_it_has_no_on_demand_price():
    entry = cost.load_prices()["instances"]["trn2.48xlarge"]
    assert entry["kind"] != "on-demand" and "NO published on-demand price" in entry["note"]


def test_user_price_file_overrides_and_must_carry_date_and_source(tmp_path):
    good = tmp_path / "p.toml"
    good.write_text('[instances."my-box"]\nprice_per_hour = 2.0\ndate = "2026-01-01"\nsource = "invoice"\n')
    assert cost.load_prices(str(good))["instances"]["my-box"]["price_per_hour"] == 2.0
    bad = tmp_path / "bad.toml"
    bad.write_text('[instances."my-box"]\nprice_per_hour = 2.0\n')
    with pytest.raises(UsageError, match="date, source"):
        cost.load_prices(str(bad))


def _timings(ref_tput_s: float, tgt_tput_s: float):
    ref = timing.device_timing("cpu", {"units_per_step": 1000, "unit": "tokens", "flops_per_step": 1e12}, [[1000 / ref_tput_s]])
    tgt = timing.device_timing("neuron", {"units_per_step": 1000, "unit": "tokens", "flops_per_step": 1e12}, [[1000 / tgt_tput_s]])
    return timing.summarise(ref, tgt)


CFG = CostInputs(prices=None, dtype="bfloat16", eng_hours=10, eng_rate=100, volume=1e9, ref_instance="g6e.xlarge",
                 target_instance="trn2.48xlarge")


def test_cost_per_million_tokens_utilisation_and_break_even():
    result = cost.estimate(_timings(1000, 4000), CFG, cost.load_prices())
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
    result = cost.estimate(_timings(1000, 1000), dataclasses.replace(CFG, ref_instance=None), cost.load_prices())
    assert result.devices[0]["cost_per_unit"] is None
    assert result.break_even["status"].startswith("not computed")
    assert any("--ref-instance" in a for a in result.assumptions)


def test_unknown_instance_lists_the_valid_ones():
    with pytest.raises(UsageError, match="p5.48xlarge"):
        instance_for(cost.load_prices(), "cpu", "nope", "--ref-instance")


def test_instances_default_by_device_type_once_in_the_config(tmp_path):
    cfg = make_config(tmp_path, "--target", "neuron", "--ref-instance", "g6e.xlarge")
    assert (cfg.cost.ref_instance, cfg.cost.target_instance) == ("g6e.xlarge", "trn2.48xlarge")


@pytest.mark.parametrize(("line", "complaint"), [
    ('price_per_hour = "2.0"', "price_per_hour = '2.0' (str)"),
    ("price_per_hour = -1", "must be a positive number"),
    ("price_per_hour = 2.0\naccelerators = 1.5", "accelerators = 1.5"),
    ('price_per_hour = 2.0\npeak_flops = { bfloat16 = "lots" }', "peak_flops"),
])
def test_wrong_typed_price_entries_are_usage_errors_naming_the_value(tmp_path, line, complaint):
    bad = tmp_path / "p.toml"
    bad.write_text(f'[instances."my-box"]\n{line}\ndate = "2026-01-01"\nsource = "invoice"\n')
    with pytest.raises(UsageError, match="my-box") as info:
        cost.load_prices(str(bad))
    assert complaint in str(info.value)
