"""The fp64-relative parity rule (dynamo `same()`), its multipliers, and per-module localisation."""

import pytest
import torch

from torchferry.harness import parity
from torchferry.harness.modes import Mode
from torchferry.report.comparison import ratio


def test_allclose_passes_without_consulting_fp64():
    x = torch.randn(2000)
    c = parity.compare("x", x, x + 1e-6, None, tol=1e-3)
    assert c.passed and c.status == "pass_allclose" and c.cosine > 0.999999


def test_target_no_further_from_fp64_than_ref_times_multiplier_passes():
    golden = torch.randn(2000, dtype=torch.float64)
    ref = (golden + 0.01 * torch.randn(2000, dtype=torch.float64)).float()
    target = (golden + 0.015 * torch.randn(2000, dtype=torch.float64)).float()
    c = parity.compare("x", ref, target, golden, tol=1e-3)
    assert not c.allclose and c.multiplier == 2.0
    assert c.passed and c.status == "pass" and c.rmse_target <= 2 * c.rmse_ref + 1e-4


def test_target_far_from_fp64_fails_with_both_rmses_reported():
    golden = torch.randn(2000, dtype=torch.float64)
    ref = (golden + 0.001 * torch.randn(2000, dtype=torch.float64)).float()
    target = (golden + 0.1 * torch.randn(2000, dtype=torch.float64)).float()
    c = parity.compare("x", ref, target, golden, tol=1e-3)
    assert not c.passed and c.status == "fail_accuracy"
    assert c.rmse_target > 10 * c.rmse_ref


def test_multiplier_is_three_for_bf16_small_tensors_or_large_tol():
    assert parity.multiplier(torch.float32, 5000, 1e-3, False) == 2.0
    assert parity.multiplier(torch.bfloat16, 5000, 1e-3, False) == 3.0
    assert parity.multiplier(torch.float32, 999, 1e-3, False) == 3.0
    assert parity.multiplier(torch.float32, 5000, 2e-2, False) == 3.0
    assert parity.multiplier(torch.float32, 5000, 1e-3, True) == 3.0


def test_shape_dtype_and_non_finite_mismatches_fail():
    x = torch.ones(4)
    assert parity.compare("x", x, torch.ones(5), None, 1e-3).status == "fail_shape"
    assert parity.compare("x", x, x.double(), None, 1e-3).status == "fail_dtype"
    assert parity.compare("x", x, torch.tensor([1.0, float("nan"), 1, 1]), None, 1e-3).status == "non_finite"


def test_tolerance_policy_per_mode_and_dtype_and_override():
    assert parity.Tolerance.resolve(Mode.FORWARD, "float32").tol == 1e-3
    assert parity.Tolerance.resolve(Mode.TRAIN, "float32").tol == 1e-2
    bf16 = parity.Tolerance.resolve(Mode.TRAIN, "bfloat16")
    assert bf16.tol == 2e-2 and bf16.low_precision and "default" in bf16.source
    override = parity.Tolerance.resolve(Mode.TRAIN, "float32", 0.5)
    assert override.tol == 0.5 and override.source == "--tol"


def test_localise_names_the_first_module_in_execution_order_that_leaves_tolerance():
    golden = {n: torch.randn(2000, dtype=torch.float64) for n in ("a", "b", "c")}
    ref = {n: g.float() for n, g in golden.items()}
    target = {"a": ref["a"].clone(), "b": ref["b"] + 1.0, "c": ref["c"] + 1.0}
    modules, first = parity.localise(ref, target, golden, 1e-3, False)
    assert [m.name for m in modules] == ["a", "b", "c"]
    assert first.name == "b" and modules[0].passed


def test_ratio_is_the_plotted_per_module_error():
    golden = torch.zeros(2000, dtype=torch.float64)
    c = parity.compare("x", torch.full((2000,), 0.1), torch.full((2000,), 0.3), golden, 1e-3)
    assert abs(ratio(c) - 3.0) < 1e-5


def test_a_gradient_that_is_zero_on_both_sides_shows_as_zero_not_cosine_0():
    from torchferry.report.comparison import describe

    c = parity.compare("grad w", torch.zeros(10), torch.zeros(10), torch.zeros(10, dtype=torch.float64), 1e-2)
    assert c.passed and c.zero and c.cosine is None
    assert describe(c) == "exactly zero on both sides"
    one_sided = parity.compare("grad w", torch.zeros(10), torch.ones(10), None, 1e-2)
    assert not one_sided.passed and not one_sided.zero and one_sided.cosine is None


@pytest.mark.parametrize("offset", [0.0, 1e-4, 0.3])
def test_streamed_comparison_judges_and_measures_as_one_pass_over_the_tensor(monkeypatch, offset):
    """The rule reads tensors in chunks (no float64 copy of a whole gradient): the verdict and every figure match a
    single-chunk pass, across chunk boundaries, with a golden arbiter and non-finite values in place."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(1001, generator=gen)
    ref[17] = float("inf")
    target = ref + offset * torch.randn(1001, generator=gen)
    target[17] = float("inf")
    golden = ref.double() + 1e-5 * torch.randn(1001, generator=gen, dtype=torch.float64)
    monkeypatch.setattr(parity, "CHUNK", 1 << 30)
    whole = parity.compare("g", ref, target, golden, 1e-3)
    monkeypatch.setattr(parity, "CHUNK", 7)
    streamed = parity.compare("g", ref, target, golden, 1e-3)
    assert (streamed.passed, streamed.status, streamed.allclose) == (whole.passed, whole.status, whole.allclose)
    for figure in ("cosine", "max_abs_diff", "rmse_target", "rmse_ref"):
        assert getattr(streamed, figure) == pytest.approx(getattr(whole, figure), rel=1e-9), figure


def test_one_generated_token_rule_equal_passes_a_near_tie_passes_a_real_mismatch_fails():
    import torch

    from torchferry.harness.parity import compare_tokens

    ref = torch.tensor([[1, 2, 3, 4]])
    equal, details = compare_tokens(ref, ref.clone(), ref.clone())
    assert equal.passed and details["match"] and details["first_mismatch"] is None
    other = torch.tensor([[1, 2, 9, 9]])
    real, details = compare_tokens(ref, other, ref.clone())  # float64 agrees with the reference: the target is off
    assert not real.passed and details["first_mismatch"] == 2 and not details["near_tie"]
    tie, details = compare_tokens(ref, other, torch.tensor([[1, 2, 7, 7]]))  # float64 disagrees too: a near tie
    assert tie.passed and details["near_tie"] and "near tie" in tie.note
    shorter, _ = compare_tokens(ref, torch.tensor([[1, 2]]), ref.clone())
    assert not shorter.passed
