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


def test_a_table_is_parsed_once_per_file_version_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    import os

    from torchferry.harness import prices

    reads = []
    real_read = prices._read
    monkeypatch.setattr(prices, "_read", lambda path, origin: reads.append(path) or real_read(path, origin))
    user = tmp_path / "p.toml"
    user.write_text('[instances."my-box"]\nprice_per_hour = 2.0\ndate = "2026-01-01"\nsource = "invoice"\n')
    first = load_prices(str(user))
    first["instances"]["my-box"]["price_per_hour"] = 99.0  # a caller's change stays its own
    assert load_prices(str(user))["instances"]["my-box"]["price_per_hour"] == 2.0 and reads.count(user) == 1
    user.write_text('[instances."my-box"]\nprice_per_hour = 3.0\ndate = "2026-01-02"\nsource = "invoice"\n')
    os.utime(user, ns=(0, user.stat().st_mtime_ns + 1_000_000))  # a later version of the file
    assert load_prices(str(user))["instances"]["my-box"]["price_per_hour"] == 3.0 and reads.count(user) == 2
