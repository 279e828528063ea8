"""Device profiles: every shipped entry names a public source, and the sources hold."""

import subprocess
import sys
from pathlib import Path

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


# ---- the generated native-op table (tools/gen_trn2_profile.py) -------------------------

MIRROR = Path("/work/.mirror/parmoham-aws+test-repo-parmoham/repo")


def test_the_native_table_names_its_snapshot_and_every_entry_a_source_file():
    table = load_profile("trn2").native_ops
    assert table is not None and table.source_commit.startswith("98154b8")
    assert len(table.native) > 300
    assert table.cpu_fallback["aten::linalg_qr"] == "torch_neuronx/python_ops/cpu_fallback_registrations.py"
    assert all(source.startswith("torch_neuronx/") for source in table.native.values())
    assert "aten::view" in table.metadata and "aten::add.Tensor" in table.native


@pytest.mark.skipif(not MIRROR.is_dir(), reason="the torch-neuronx source snapshot is not on this machine")
def test_the_generator_reproduces_the_checked_in_table(tmp_path):
    out = tmp_path / "ops.toml"
    generator = Path(__file__).parents[2] / "tools" / "gen_trn2_profile.py"
    done = subprocess.run([sys.executable, str(generator), "--source", str(MIRROR), "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == load_profile("trn2").native_ops.path.read_text()


def _profile_with(tmp_path, body: str, table: str | None = None) -> Path:
    path = tmp_path / "p.toml"
    head = 'name = "x"\nmemory_bytes = 1024\n'
    if table is not None:
        (tmp_path / "ops.toml").write_text(table)
        head += 'native_ops = "ops.toml"\n'
    path.write_text(head + '[sources]\nsrc = "a source"\n' + body)
    return path


def test_a_host_fallback_naming_an_unknown_op_is_rejected_with_its_line(tmp_path):
    bad = _profile_with(tmp_path, '[[host_fallback]]\nop = "aten::nonzro"\nreason = "r"\nsources = ["src"]\n')
    with pytest.raises(UsageError, match=r"p.toml:6: host_fallback entry 'aten::nonzro' names no ATen op"):
        load_profile(bad)


def test_a_native_table_naming_an_unknown_op_or_no_source_is_rejected_with_its_line(tmp_path):
    head = 'source_repository = "r"\nsource_commit = "c"\n[native]\n'
    with pytest.raises(UsageError, match=r"ops.toml:4: \[native\] entry 'aten::not_an_op' names no ATen op"):
        load_profile(_profile_with(tmp_path, "", head + '"aten::not_an_op" = "f.py"\n'))
    with pytest.raises(UsageError, match=r"ops.toml:4: \[native\] entry 'aten::relu' has no source"):
        load_profile(_profile_with(tmp_path, "", head + '"aten::relu" = " "\n'))


def test_a_bad_profile_is_a_usage_error_at_enable(run_python, tmp_path):
    bad = _profile_with(tmp_path, '[[host_fallback]]\nop = "aten::nope"\nreason = "r"\nsources = ["src"]\n')
    result = run_python(
        """
        import torchferry.device as d
        from torchferry.errors import UsageError
        try:
            d.enable()
        except UsageError as exc:
            print("UsageError:", exc)
        """,
        env={"TORCHFERRY_PROFILE": str(bad)},
    )
    assert "UsageError:" in result.stdout and "'aten::nope' names no ATen op" in result.stdout, result.stderr


def test_qr_is_a_predicted_fallback_named_with_its_source_file(neuron, fallback_mode):
    from torchferry.device import target

    a = torch.randn(4, 4).to("neuron")
    neuron.clear_op_tracking()
    fallback_mode("warn")  # linalg_qr may have warned already in this worker (once per op and process)
    with pytest.warns(UserWarning, match="aten::linalg_qr runs on the host CPU"):
        q, r = torch.linalg.qr(a)
    torch.testing.assert_close((q @ r).cpu(), a.cpu(), atol=1e-5, rtol=1e-5)
    assert neuron.get_fallback_ops().get("aten::linalg_qr") == 1
    reason = target.fallback_reasons()["aten::linalg_qr"]
    assert "explicit CPU fallback" in reason and "cpu_fallback_registrations.py" in reason


def test_views_and_metadata_ops_never_count_as_fallbacks(neuron):
    x = torch.arange(12.0, device="neuron")
    neuron.clear_op_tracking()
    y = x.view(3, 4).t().as_strided((2, 2), (1, 2)).detach()
    x.reshape(4, 3).transpose(0, 1).unsqueeze(0).expand(2, 3, 4)
    assert y.shape == (2, 2)
    assert neuron.get_fallback_ops() == {}
    assert neuron.get_executed_ops()


def test_an_op_the_target_lacks_is_a_predicted_fallback_with_the_commit(neuron):
    from torchferry.device import target

    neuron.clear_op_tracking()
    torch.atan2(torch.ones(2, device="neuron"), torch.ones(2, device="neuron"))
    assert neuron.get_fallback_ops() == {"aten::atan2": 1}
    assert "not implemented in TorchNeuron 98154b8" in target.fallback_reasons()["aten::atan2"]
