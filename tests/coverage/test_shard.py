"""--shard K/N: a stable, cost-balanced split of the selection (pure: no worker runs)."""

import pytest

from torchferry.coverage import shard
from torchferry.errors import UsageError

NAMES = [f"causal-lm/arch{i:02d}" for i in range(23)]


def test_parse_takes_k_of_n_and_refuses_anything_else():
    assert shard.parse("2/8") == shard.Shard(2, 8) and str(shard.parse(" 1 / 1 ")) == "1/1"
    for bad in ("0/4", "5/4", "1-4", "a/b", "3"):
        with pytest.raises(UsageError, match="expected K/N with 1 <= K <= N"):
            shard.parse(bad)


def test_every_architecture_lands_in_exactly_one_shard_whatever_the_input_order():
    costs = {n: float(i % 7) for i, n in enumerate(NAMES)}
    parts = shard.assign(NAMES, costs, 4)
    assert sorted(n for p in parts for n in p) == sorted(NAMES)
    assert shard.assign(list(reversed(NAMES)), costs, 4) == parts  # stable: the order given does not matter
    assert [shard.select(NAMES, costs, shard.Shard(k, 4)) for k in (1, 2, 3, 4)] == parts
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_the_big_models_are_spread_and_the_totals_balanced():
    costs = {n: 1.0 for n in NAMES} | {"causal-lm/arch03": 90.0, "causal-lm/arch07": 80.0, "causal-lm/arch11": 70.0}
    parts = shard.assign(NAMES, costs, 3)
    big = [{"causal-lm/arch03", "causal-lm/arch07", "causal-lm/arch11"} & set(p) for p in parts]
    assert [len(b) for b in big] == [1, 1, 1]  # one of the dearest per shard
    totals = [sum(costs[n] for n in p) for p in parts]
    assert max(totals) - min(totals) <= max(costs.values())


def test_unknown_costs_count_as_the_median_and_no_costs_is_a_round_robin_by_name():
    parts = shard.assign(NAMES, {}, 5)
    assert parts[0][:2] == ["causal-lm/arch00", "causal-lm/arch09"]  # snake order: 0, 9, 10, 19, 20 for shard 1
    assert shard.assign(NAMES, {"causal-lm/arch05": 3.0}, 5) == shard.assign(NAMES, {"causal-lm/arch05": 3.0,
                                                                                     "causal-lm/arch06": 3.0}, 5)
