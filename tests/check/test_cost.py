"""The cost figures derived from measured throughput and the price table (the table itself: tests/harness)."""

import dataclasses

import pytest
from checkcfg import make_config

from torchferry.check import cost, timing
from torchferry.check.config import CostInputs
from torchferry.check.timing import StepFigures
from torchferry.errors import UsageError
from torchferry.harness.prices import load_prices


def _timings(ref_tput_s: float, tgt_tput_s: float):
    work = StepFigures(units_per_step=1000, unit="tokens", flops_per_step=1e12)
    ref = timing.device_timing("cpu", work, [[1000 / ref_tput_s]])
    tgt = timing.device_timing("neuron", work, [[1000 / tgt_tput_s]])
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


# Hand-checkable projection: $3.60/h for one accelerator = $0.001/s; peak 1e12 FLOP/s; 1e12 FLOPs per step of 1000
# tokens = 1e9 FLOPs per token. Roofline step 1 s; at u of peak: 1000u tokens/s, $1/u per 1M tokens.
# The reference: $7.20/h at a measured 1000 tokens/s = $2 per 1M tokens, so the break-even utilisation is 50%.
TABLE = {"instances": {
    "tgt": {"price_per_hour": 3.6, "accelerators": 1, "date": "d", "source": "s", "peak_flops": {"bfloat16": 1e12},
            "peaks_source": "p"},
    "ref": {"price_per_hour": 7.2, "accelerators": 1, "date": "d", "source": "s"},
}}
HAND = CostInputs(prices=None, dtype="bfloat16", eng_hours=10, eng_rate=100, volume=1e9, ref_instance="ref",
                  target_instance="tgt")


def _emulated(ref_tput_s: float = 1000.0, ranks: int = 0):
    work = StepFigures(units_per_step=1000, unit="tokens", flops_per_step=1e12)
    ref = timing.device_timing("cpu", work, [[1000 / ref_tput_s]])
    tgt = timing.device_timing("neuron", dataclasses.replace(work, emulates="trn2"), [[0.25]])
    result = timing.summarise(ref, tgt)
    result.ranks = [tgt] * ranks
    return result


def test_an_emulated_target_is_projected_by_utilisation_never_priced_from_host_throughput():
    result = cost.estimate(_emulated(), HAND, TABLE)
    target = result.devices[1]
    assert target["cost_per_unit"] is None and target["utilisation"] is None  # 4000 tokens/s here is the host's
    assert any("emulates trn2 on this host" in a and "not priced" in a for a in result.assumptions)
    p = result.projection
    assert p["roofline_step_s"] == pytest.approx(1.0) and p["flops_per_unit"] == pytest.approx(1e9)
    assert p["cost_per_unit_at_peak"] == pytest.approx(1.0)
    by_u = {row["utilisation"]: row for row in p["rows"]}
    assert sorted(by_u) == [0.10, 0.25, 0.40, 0.60]
    assert by_u[0.10]["step_s"] == pytest.approx(10.0) and by_u[0.10]["throughput_per_s"] == pytest.approx(100.0)
    assert [by_u[u]["cost_per_unit"] for u in (0.10, 0.25, 0.40, 0.60)] == pytest.approx([10.0, 4.0, 2.5, 1 / 0.6])
    assert p["break_even_utilisation"] == pytest.approx(0.5)
    # engineering ($1000) is recovered only where the target is cheaper than the reference's $2 per 1M tokens
    assert [by_u[u]["break_even_units"] for u in (0.10, 0.25, 0.40)] == [None, None, None]
    assert by_u[0.60]["break_even_units"] == pytest.approx(1000 / ((2 - 1 / 0.6) / 1e6))
    assert result.break_even["status"].startswith("projected: the target is cheaper per unit from 50% of tgt's peak")


def test_break_even_utilisation_above_the_peak_is_never():
    result = cost.estimate(_emulated(ref_tput_s=4000), HAND, TABLE)  # reference $0.50 per 1M tokens
    assert result.projection["break_even_utilisation"] == pytest.approx(2.0)
    assert result.break_even["status"].startswith("never: even at 100% of tgt's peak")


def test_the_projection_spreads_the_step_over_the_target_ranks():
    p = cost.estimate(_emulated(ranks=2), HAND, TABLE).projection
    assert p["accelerators_used"] == 2 and p["roofline_step_s"] == pytest.approx(0.5)
    assert p["cost_per_unit_at_peak"] == pytest.approx(1.0)  # per unit, the price of work does not change


def test_a_real_target_on_several_ranks_pays_for_every_accelerator():
    work = StepFigures(units_per_step=1000, unit="tokens", flops_per_step=1e12)
    result = timing.summarise(timing.device_timing("cpu", work, [[1.0]]), timing.device_timing("x", work, [[1.0]]))
    result.ranks = [result.target] * 2
    target = cost.estimate(result, HAND, TABLE).devices[1]
    assert target["cost_per_unit"] == pytest.approx(0.001 * 2 / 1000 * 1e6)  # 2 accelerators, 1000 tokens/s together
    assert target["utilisation"] == pytest.approx(1e12 / (1e12 * 2))


def test_a_peak_without_its_source_is_a_usage_error(tmp_path):
    prices = tmp_path / "p.toml"
    prices.write_text('[instances.box]\nprice_per_hour = 1.0\ndate = "d"\nsource = "s"\npeak_flops = { bfloat16 = 1e12 }\n')
    with pytest.raises(UsageError, match="peaks_source"):
        load_prices(prices)
