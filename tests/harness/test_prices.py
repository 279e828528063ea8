"""The dated price table: shipped entries, a user's file merged over it, every entry type-checked."""

import pytest

from torchferry.errors import UsageError
from torchferry.harness.prices import instance_for, load_prices


def test_every_shipped_price_has_a_date_and_a_source():
    table = load_prices()
    assert table["instances"]
    for name, entry in table["instances"].items():
        assert entry["price_per_hour"] > 0 and entry["date"] and entry["source"], name


def test_trn2_says_it_has_no_on_demand_price():
    entry = load_prices()["instances"]["trn2.48xlarge"]
    assert entry["kind"] != "on-demand" and "NO published on-demand price" in entry["note"]


def test_user_price_file_overrides_and_must_carry_date_and_source(tmp_path):
    good = tmp_path / "p.toml"
    good.write_text('[instances."my-box"]\nprice_per_hour = 2.0\ndate = "2026-01-01"\nsource = "invoice"\n')
    assert load_prices(str(good))["instances"]["my-box"]["price_per_hour"] == 2.0
    bad = tmp_path / "bad.toml"
    bad.write_text('[instances."my-box"]\nprice_per_hour = 2.0\n')
    with pytest.raises(UsageError, match="date, source"):
        load_prices(str(bad))


def test_unknown_instance_lists_the_valid_ones():
    with pytest.raises(UsageError, match="p5.48xlarge"):
        instance_for(load_prices(), "cpu", "nope", "--ref-instance")


@pytest.mark.parametrize(("line", "complaint"), [
    ('price_per_hour = "2.0"', "price_per_hour = '2.0' (str)"),
    ("price_per_hour = -1", "must be a positive, finite number"),
    ("price_per_hour = 2.0\naccelerators = 1.5", "accelerators = 1.5"),
    ('price_per_hour = 2.0\npeak_flops = { bfloat16 = "lots" }', "peak_flops"),
])
def test_wrong_typed_price_entries_are_usage_errors_naming_the_value(tmp_path, line, complaint):
    bad = tmp_path / "p.toml"
    bad.write_text(f'[instances."my-box"]\n{line}\ndate = "2026-01-01"\nsource = "invoice"\n')
    with pytest.raises(UsageError, match="my-box") as info:
        load_prices(str(bad))
    assert complaint in str(info.value)
