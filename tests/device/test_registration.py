"""Opt-in registration: importing touches no device; enable() and autoload register it;
a PrivateUse1 already held by another backend, or an installed torch-neuronx, is respected."""

import textwrap


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
