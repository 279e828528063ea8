"""Opt-in registration: importing touches no device; enable() and autoload register it;
a PrivateUse1 already held by another backend, or an installed torch-neuronx, is respected."""

import textwrap

import pytest


def test_importing_torchferry_registers_nothing(run_python):
    result = run_python(
        """
        import sys, torch
        import torchferry, torchferry.cli, torchferry.device, torchferry.check, torchferry.scan
        assert torch._C._get_privateuse1_backend_name() == "privateuseone", "import registered a device"
        assert "torchferry.device._C" not in sys.modules, "import loaded the C++ core"
        assert not hasattr(torch, "neuron")
        print("clean")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "clean" in result.stdout


def test_enable_registers_neuron_and_is_idempotent(run_python):
    result = run_python(
        """
        import torchferry.device as d, torch
        d.enable(); d.enable()
        assert torch._C._get_privateuse1_backend_name() == "neuron"
        assert torch.accelerator.current_accelerator() == torch.device("neuron")
        assert torch.ones(2, device="neuron").neuron().is_neuron
        print(torch.neuron.device_count())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_autoload_runs_an_unchanged_script_on_neuron(run_python):
    # An unchanged script that only uses torch.accelerator lands on neuron.
    result = run_python(
        """
        import torch
        device = torch.accelerator.current_accelerator()
        x = torch.ones(3, device=device) * 2
        print(device, x.sum().item())
        """,
        env={"TORCHFERRY_DEVICE": "neuron"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["neuron", "6.0"]


def test_without_the_variable_autoload_does_nothing(run_python):
    result = run_python("import torch; print(torch._C._get_privateuse1_backend_name())")
    assert result.stdout.strip() == "privateuseone"


def test_enable_refuses_a_privateuse1_held_by_another_backend(run_python):
    result = run_python(
        """
        import torch
        torch.utils.rename_privateuse1_backend("npu")
        import torchferry.device as d
        from torchferry.errors import DeviceConflictError
        try:
            d.enable()
        except DeviceConflictError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "already held by the 'npu' backend" in result.stdout
    assert "Use the real device" in result.stdout


def test_stands_aside_when_torch_neuronx_is_installed(run_python, tmp_path):
    fake = tmp_path / "torch_neuronx"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    code = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import torch
        import torchferry.device as d
        from torchferry.errors import DeviceConflictError
        try:
            d.enable()
        except DeviceConflictError as exc:
            print("refused:", exc)
        print(torch._C._get_privateuse1_backend_name())
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "refused: torch-neuronx (the real TorchNeuron) is installed" in result.stdout
    assert result.stdout.strip().endswith("privateuseone")


def test_autoload_stands_aside_for_torch_neuronx(run_python, tmp_path):
    fake = tmp_path / "torch_neuronx"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    result = run_python(
        "import torch; print(torch._C._get_privateuse1_backend_name())",
        env={"TORCHFERRY_DEVICE": "neuron", "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "privateuseone"


def test_bad_visible_cores_fail_enable_with_the_variable_named(run_python):
    result = run_python(
        """
        import torchferry.device as d
        from torchferry.errors import UsageError
        try:
            d.enable()
        except UsageError as exc:
            print(exc)
        """,
        env={"NEURON_RT_VISIBLE_CORES": "3-1"},
    )
    assert "NEURON_RT_VISIBLE_CORES='3-1'" in result.stdout, result.stderr


# ---- kernels the dispatcher would send past the device (PyTorch's device-generic suite) ----
def test_conj_physical_in_place_on_a_conjugate_view(neuron):
    # CompositeExplicitAutograd `conj_physical_` called a CPU DispatchStub with the device
    # tensor: "DispatchStub: missing kernel for neuron".
    import torch

    x = torch.tensor([1 + 2j, -3 - 1j, 0.5j], dtype=torch.complex64)
    on_device = x.to("neuron").conj()
    on_cpu = x.clone().conj()
    on_device.conj_physical_()
    on_cpu.conj_physical_()
    assert on_device.device.type == "neuron"
    assert torch.equal(on_device.cpu(), on_cpu)
    plain = x.to("neuron")
    plain.conj_physical_()
    assert torch.equal(plain.cpu(), x.conj_physical())


def test_mode_with_out_tensors(neuron):
    # `mode.values` refused every device but CPU, CUDA and XPU.
    import torch

    data = torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 1.0, 1.0]])
    values = torch.empty(0, device="neuron")
    indices = torch.empty(0, dtype=torch.long, device="neuron")
    result = torch.mode(data.to("neuron"), dim=1, out=(values, indices))
    expected = torch.mode(data, dim=1)
    assert result.values is values and result.indices is indices
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)


def _encoder(**kwargs):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=2, **kwargs).eval()


def test_nested_tensors_fail_clearly_with_the_way_out(neuron):
    # TorchNeuron registers no NestedTensor kernels, and PyTorch's transformer fast path builds
    # nested tensors on any PrivateUse1 device: the device refuses them as the target would,
    # naming the fix, instead of "NestedTensorImpl doesn't support strides" or "Could not run".
    import torch

    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    encoder = _encoder().to("neuron")
    with torch.no_grad(), pytest.raises(RuntimeError, match="nested tensors .* not supported on the neuron") as caught:
        encoder(x.to("neuron"), src_key_padding_mask=mask.to("neuron"))
    assert "enable_nested_tensor=False" in str(caught.value)
    nested = torch.nested.nested_tensor([torch.ones(3, 16), torch.ones(2, 16)])
    with pytest.raises(NotImplementedError, match="nested tensors .* not supported on the neuron"):
        nested.to("neuron")


@pytest.mark.parametrize("way_out", ["enable_nested_tensor=False", "set_fastpath_enabled(False)"])
def test_the_named_ways_out_of_nested_tensors_work(neuron, way_out):
    import torch

    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    nested_allowed = way_out != "enable_nested_tensor=False"
    cpu_encoder = _encoder(enable_nested_tensor=nested_allowed)
    device_encoder = _encoder(enable_nested_tensor=nested_allowed).to("neuron")
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(way_out != "set_fastpath_enabled(False)")
    try:
        with torch.no_grad():
            got = device_encoder(x.to("neuron"), src_key_padding_mask=mask.to("neuron"))
            expected = cpu_encoder(x, src_key_padding_mask=mask)
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)
    assert got.device.type == "neuron" and not got.is_nested
    keep = ~mask  # padded positions are unspecified on the fast path
    torch.testing.assert_close(got.cpu()[keep], expected[keep])
