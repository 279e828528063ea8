"""Op accounting like TorchNeuron's, and the explicit host-fallback path of the profile."""

import warnings

import pytest
import torch

from torchferry.device import _runtime


@pytest.fixture
def fallback_mode(neuron):
    def set_mode(mode):
        _runtime.set_fallback_mode(mode)

    yield set_mode
    _runtime.set_fallback_mode("warn")


def test_executed_ops_are_counted_per_op(neuron):
    x = torch.ones(4, device="neuron")
    neuron.clear_op_tracking()
    for _ in range(3):
        x = x + 1
    executed = neuron.get_executed_ops()
    assert executed["aten::add.Tensor"] == 3
    assert neuron.get_fallback_ops() == {}
    neuron.clear_op_tracking()
    assert neuron.get_executed_ops() == {}


def test_profile_ops_run_on_the_host_and_count_as_fallbacks(neuron, fallback_mode):
    fallback_mode("silent")
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="neuron")
    neuron.clear_op_tracking()
    idx = torch.nonzero(x)
    assert idx.device.type == "neuron" and idx.cpu().flatten().tolist() == [1, 3]
    assert neuron.get_fallback_ops() == {"aten::nonzero": 1}
    assert "aten::nonzero" not in neuron.get_executed_ops()
    # The host path copies: the result does not share the input's memory.
    assert idx.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_fallback_warns_once_per_op(neuron, fallback_mode):
    fallback_mode("warn")  # resets the set of ops already warned about
    x = torch.tensor([1.0, 0.0, 3.0], device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nonzero(x)
        torch.nonzero(x)
        torch.masked_select(x, x > 0)
    messages = [str(w.message) for w in caught if "ran on the host" in str(w.message)]
    assert len(messages) == 2
    assert messages[0].startswith("aten::nonzero ran on the host") and "TORCHFERRY_FALLBACK" in messages[0]
    assert messages[1].startswith("aten::masked_select ran on the host")


def test_fallback_error_mode_names_the_op_and_the_knob(neuron, fallback_mode):
    fallback_mode("error")
    x = torch.tensor([1.0, 0.0], device="neuron")
    with pytest.raises(RuntimeError) as err:
        torch.nonzero(x)
    message = str(err.value)
    assert "aten::nonzero would run on the host" in message
    assert "TORCHFERRY_FALLBACK=error" in message and "'trn2' device profile" in message


def test_fallback_mode_from_the_environment(run_python):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        try:
            torch.unique(torch.tensor([1, 1, 2], device="neuron"))
        except RuntimeError as exc:
            print("raised:", "aten::_unique2" in str(exc))
        """,
        env={"TORCHFERRY_FALLBACK": "error"},
    )
    assert result.stdout.strip() == "raised: True", result.stderr


def test_in_place_ops_on_the_host_path_write_back(neuron, fallback_mode, tmp_path):
    # A user profile may list in-place ops; their result must land in device memory.
    profile = tmp_path / "inplace.toml"
    profile.write_text(
        'name = "test"\nmemory_bytes = 1073741824\n[sources]\nsrc = "a test"\n'
        '[[host_fallback]]\nop = "aten::mul_.Tensor"\nreason = "test"\nsources = ["src"]\n'
    )
    from torchferry.device.profile import load_profile

    previous = _runtime._profile
    _runtime._profile = load_profile(profile)
    try:
        fallback_mode("silent")
        x = torch.full((3,), 2.0, device="neuron")
        ptr = x.data_ptr()
        y = x.mul_(torch.full((3,), 4.0, device="neuron"))
        assert y is x and x.data_ptr() == ptr and x.cpu().tolist() == [8.0] * 3
        assert neuron.get_fallback_ops().get("aten::mul_.Tensor") == 1
    finally:
        _runtime._profile = previous
