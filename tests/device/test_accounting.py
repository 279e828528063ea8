"""Op accounting like TorchNeuron's, the explicit host-fallback path of the profile, host
syncs and the one-line fallback summary."""

import re
import warnings

import pytest
import torch

import torchferry.device
from torchferry.device import _runtime


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


def test_the_executed_op_count_is_the_sum_of_the_per_op_table(neuron):
    torch.neuron.clear_op_tracking()
    assert torchferry.device.executed_op_count() == 0
    x = torch.ones(4, 4, device="neuron")
    (x @ x + 1).relu().sum()
    table = torch.neuron.get_executed_ops()
    assert sum(table.values()) >= 4 and torchferry.device.executed_op_count() == sum(table.values())
    torch.neuron.clear_op_tracking()
    assert torchferry.device.executed_op_count() == 0


def test_work_inside_uncounted_is_neither_counted_nor_warned_about(neuron, fallback_mode):
    # the recorders' loss read and gradient norm inside a user's script: not the user's ops, syncs or fallbacks
    fallback_mode("warn")
    x = torch.tensor([3.0, 1.0, 3.0, 2.0], device="neuron")
    neuron.clear_op_tracking()
    before = torchferry.device.eager_compiles()
    with warnings.catch_warnings(record=True) as caught, torchferry.device.uncounted():
        warnings.simplefilter("always")
        with torchferry.device.uncounted():  # spans nest
            float((x * 2).sum())
        torch.unique(x)  # a host fallback: no count, no warning
        x.cpu()
    assert not [w for w in caught if "_unique2" in str(w.message)]
    assert neuron.get_executed_ops() == {} and neuron.get_fallback_ops() == {}
    assert torchferry.device.host_syncs() == {}
    assert torchferry.device.eager_compiles().since(before).calls == 0
    float((x * 2).sum())  # after the span, the same work counts again
    assert neuron.get_executed_ops()["aten::mul.Tensor"] == 1
    assert torchferry.device.host_syncs() == {"aten::_local_scalar_dense": 1}
    assert torchferry.device.eager_compiles().since(before).calls >= 2


def test_views_are_counted_and_stay_views_of_the_device_storage(neuron):
    x = torch.arange(12.0, device="neuron")
    neuron.clear_op_tracking()
    viewed = x.view(3, 4)
    strided = x.as_strided((2, 2), (1, 2), 1)
    executed = neuron.get_executed_ops()
    assert executed["aten::view"] == 1 and executed["aten::as_strided"] == 1
    assert neuron.get_fallback_ops() == {}
    x.add_(1)
    assert viewed.device.type == "neuron" and viewed.cpu().tolist()[2] == [9.0, 10.0, 11.0, 12.0]
    assert strided.cpu().tolist() == [[2.0, 4.0], [3.0, 5.0]]
    assert strided.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_profile_ops_run_on_the_host_and_count_as_fallbacks(neuron, fallback_mode):
    # torch.unique: data-dependent and not implemented by TorchNeuron, so on the host.
    fallback_mode("silent")
    x = torch.tensor([3.0, 1.0, 3.0, 2.0], device="neuron")
    neuron.clear_op_tracking()
    values = torch.unique(x)
    assert values.device.type == "neuron" and values.cpu().tolist() == [1.0, 2.0, 3.0]
    assert neuron.get_fallback_ops() == {"aten::_unique2": 1}
    assert "aten::_unique2" not in neuron.get_executed_ops()
    # The host path copies: the result does not share the input's memory.
    assert values.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_data_dependent_ops_the_target_implements_run_on_the_device_and_sync(neuron, fallback_mode):
    # TorchNeuron runs nonzero on the device at the input's size, then the host reads the
    # count (python_ops/torch_mlir/ops/nonzero.py): a host sync, not a fallback.
    fallback_mode("warn")
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="neuron")
    neuron.clear_op_tracking()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idx = torch.nonzero(x)
    assert idx.cpu().flatten().tolist() == [1, 3]
    assert neuron.get_fallback_ops() == {}
    assert neuron.get_executed_ops()["aten::nonzero"] == 1
    assert torchferry.device.host_syncs()["aten::nonzero"] == 1


def test_one_hot_syncs_the_host_on_every_call_and_its_comparison_twin_does_not(neuron):
    """TorchNeuron's one_hot reads the indices' max and min with .item() before its kernel, even with num_classes
    given (torch_mlir/ops/embedding.py): an MoE router or label smoothing that calls it waits for the host each step.
    The twin, a comparison with arange, gives the same tensor and reads nothing."""
    labels = torch.tensor([0, 2, 1, 3], device="neuron")
    neuron.clear_op_tracking()
    hot = torch.nn.functional.one_hot(labels, 4)
    assert torchferry.device.host_syncs() == {"aten::one_hot": 1} and neuron.get_fallback_ops() == {}
    assert "torch.arange(num_classes)" in torchferry.device.fallback_reasons()["aten::one_hot"]  # why, and the fix
    neuron.clear_op_tracking()
    twin = (labels.unsqueeze(-1) == torch.arange(4, device="neuron")).long()
    assert torchferry.device.host_syncs() == {}
    labels.sum().item()  # a scalar read syncs too, and has no reason of its own (no "not implemented" default)
    assert "aten::_local_scalar_dense" not in torchferry.device.fallback_reasons()
    assert torch.equal(hot.cpu(), twin.cpu())


def test_host_syncs_are_counted_by_cause(neuron):
    x = torch.tensor([1.0, -2.0, 3.0], device="neuron")
    neuron.clear_op_tracking()
    x.sum().item()
    bool(x[0] > 0)
    x.tolist()
    x[x > 0]  # boolean mask: TorchNeuron's index turns it into indices with nonzero
    x[x > 0] = 0.0  # a scalar into a mask: a `where` on the device, no sync
    syncs = torchferry.device.host_syncs()
    assert syncs["aten::_local_scalar_dense"] == 2
    assert syncs["aten::_copy_from (device to host)"] >= 1
    assert syncs["aten::index.Tensor (boolean mask)"] == 1
    assert not any("index_put" in key for key in syncs)
    neuron.clear_op_tracking()
    assert torchferry.device.host_syncs() == {}


def test_fallback_warns_once_per_op(neuron, fallback_mode):
    fallback_mode("warn")  # resets the set of ops already warned about
    x = torch.tensor([1, 0, 3], device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.unique(x)
            torch.bincount(x)
    messages = [str(w.message) for w in caught if "runs on the host CPU" in str(w.message)]
    assert len(messages) == 2
    assert messages[0].startswith("aten::_unique2 runs on the host CPU") and "TORCHFERRY_FALLBACK" in messages[0]
    assert messages[1].startswith("aten::bincount runs on the host CPU")


def test_one_line_summary_names_the_fallback_ops(neuron, fallback_mode):
    fallback_mode("silent")
    x = torch.tensor([1, 0, 3], device="neuron")
    neuron.clear_op_tracking()
    assert torchferry.device.fallback_summary() == ""
    torch.unique(x), torch.unique(x), torch.bincount(x)
    line = torchferry.device.fallback_summary()
    assert "\n" not in line
    assert line.startswith("torchferry: 2 ops ran as host fallbacks on 'trn2' (3 calls): aten::_unique2 (2), "
                           "aten::bincount (1)")


def test_a_model_with_many_fallbacks_warns_once_per_op_and_sums_up_at_exit(run_python):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        x = torch.full((8,), 2.0, device="neuron")
        for _ in range(50):
            torch.atan2(x, x), torch.lgamma(x), torch.digamma(x), torch.unique(x)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "runs on the host CPU" in line]
    assert len(lines) == 4, result.stderr
    summary = [line for line in result.stderr.splitlines() if line.startswith("torchferry: ")]
    assert summary == ["torchferry: 4 ops ran as host fallbacks on 'trn2' (200 calls): aten::_unique2 (50), "
                       "aten::atan2 (50), aten::digamma (50), aten::lgamma (50); see torch.neuron.get_fallback_ops()"]


def test_the_exit_paragraph_adds_host_syncs_and_eager_compilations_after_the_first_step(run_python, tmp_path):
    # the one-line change on a training loop: 3 steps, a loss read each step, a new batch shape in step 3
    result = run_python(
        """
        import torch
        m = torch.nn.Linear(4, 4).to("neuron")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for rows in (2, 2, 3):
            loss = m(torch.ones(rows, 4, device="neuron")).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(loss.item())
        """, env={"TORCHFERRY_DEVICE": "neuron", "TORCHFERRY_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("torchferry: no op ran as a host fallback"))
    syncs, where = lines[start + 1], lines[start + 2]
    assert syncs.startswith("  host syncs: 3 (aten::_local_scalar_dense 3); eager compilations: ")
    total = int(re.search(r"eager compilations: (\d+) op signatures", syncs).group(1))
    later = int(re.search(r"(\d+) new after the first optimizer step", syncs).group(1))
    assert f"({total} cold, 0 from the cache)" in syncs  # a fresh cache folder
    assert 0 < later < total  # the step-3 shape compiles anew; steps 1-2 share their signatures
    assert "`ferry check -- python <your script>`" in where and "torchferry.device.host_syncs()" in where


def test_the_first_step_mark_leaves_other_global_optimizer_hooks_working(run_python, tmp_path):
    # a user's (or ferry check's recorder's) global post-hook beside the device's first-step mark: the
    # mark once removed itself mid-iteration and every optimizer.step() raised "OrderedDict mutated"
    result = run_python(
        """
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        calls = []
        register_optimizer_step_post_hook(lambda *a: calls.append(1))
        m = torch.nn.Linear(4, 4).to("neuron")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            m(torch.ones(2, 4, device="neuron")).sum().backward()
            opt.step()
        print("user hook calls", len(calls))
        """, env={"TORCHFERRY_DEVICE": "neuron", "TORCHFERRY_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "user hook calls 3" in result.stdout
    assert "new after the first optimizer step" in result.stderr


def test_fallback_error_mode_names_the_op_and_the_knob(neuron, fallback_mode):
    fallback_mode("error")
    x = torch.tensor([1.0, 0.0], device="neuron")
    with pytest.raises(RuntimeError) as err:
        torch.unique(x)
    message = str(err.value)
    assert "aten::_unique2 would run on the host CPU, not the device, on 'trn2'" in message
    assert "TORCHFERRY_FALLBACK=error" in message and "output shape depends on the data" in message


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
