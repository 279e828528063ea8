"""Device profiles: every shipped entry names a public source, and the sources hold."""

import pytest
import torch

from torchferry.device.profile import load_profile, shipped_profiles
from torchferry.errors import UsageError


def test_trn2_is_shipped_and_every_entry_cites_a_source():
    profile = load_profile("trn2")
    assert profile.memory_bytes == 24 * 2**30
    assert profile.host_fallback
    for entry in profile.host_fallback:
        assert entry.sources and all(profile.sources[s].strip() for s in entry.sources)


@pytest.mark.parametrize("entry", load_profile("trn2").host_fallback, ids=lambda e: e.op)
def test_each_data_dependent_entry_carries_pytorchs_dynamic_output_shape_tag(entry):
    # The source the profile cites: the op is tagged dynamic_output_shape in PyTorch.
    assert "dynamic_output_shape" in entry.sources
    name, _, overload = entry.op.removeprefix("aten::").partition(".")
    op = getattr(getattr(torch.ops.aten, name), overload or "default")
    assert torch.Tag.dynamic_output_shape in op.tags


def test_unknown_profile_lists_the_shipped_ones():
    with pytest.raises(UsageError, match="Shipped profiles: " + ", ".join(shipped_profiles())):
        load_profile("trn9")


def test_entry_without_a_known_source_is_rejected(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmemory_bytes = 1\n[[host_fallback]]\nop = "aten::nonzero"\nreason = "r"\nsources = ["nowhere"]\n')
    with pytest.raises(UsageError, match="must name at least one source"):
        load_profile(bad)


def test_malformed_profile_says_what_it_needs(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(UsageError, match="malformed"):
        load_profile(bad)
