"""The `torch_neuronx` stand-in and the public namespaces of the built-in device.

Hugging Face libraries look for `torch_neuronx` with `importlib.util.find_spec` before
they take their Neuron paths; the stand-in answers only in a process that enabled the
device, is never a distribution, and cannot fool torchferry's own real-package check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import torchferry
import torchferry.device

# Public names of the real package's `torch_neuronx/__init__.py` (torch-neuronx source
# snapshot, commit 98154b8: its imports from .memory, .streams, .profiling,
# .neuron_dynamo_backend.metrics and its own functions), less the NKI entry points.
REAL_PUBLIC_API = [
    "Event", "NeuronProfiler", "Stream", "StreamContext", "clear_op_tracking", "current_device",
    "current_stream", "default_stream", "device", "device_count", "empty_cache",
    "get_device_properties", "get_dynamo_metrics", "get_executed_ops", "get_fallback_ops",
    "is_neuron_runtime_initialized", "max_memory_allocated", "max_memory_reserved",
    "memory_allocated", "memory_reserved", "memory_stats", "memory_summary", "neuron",
    "reset_accumulated_memory_stats", "reset_dynamo_metrics", "reset_peak_memory_stats",
    "set_device", "set_stream", "stream", "synchronize",
]
NKI = ["nki_op", "wrap_nki"]


def test_import_torchferry_alone_makes_no_standin_visible(run_python):
    result = run_python("""
        import importlib.util, sys
        import torchferry, torchferry.device, torchferry.device.standin
        assert importlib.util.find_spec("torch_neuronx") is None
        assert "torch_neuronx" not in sys.modules
        try:
            import torch_neuronx
        except ImportError:
            print("no torch_neuronx")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no torch_neuronx"


def test_enabled_device_makes_torch_neuronx_the_standin(neuron):
    spec = importlib.util.find_spec("torch_neuronx")
    assert spec is not None
    import torch_neuronx

    package = Path(torchferry.__file__).parent
    assert Path(spec.origin).is_relative_to(package)
    assert Path(torch_neuronx.__file__).is_relative_to(package)
    assert torch_neuronx.__torchferry__ is True
    assert importlib.util.find_spec("torch_xla") is None, "torch_xla would send transformers down its XLA path"


def test_standin_offers_the_real_public_api_as_the_devices_own(neuron):
    import torch_neuronx

    assert sorted(torch_neuronx.__all__) == sorted(REAL_PUBLIC_API)
    assert torch_neuronx.neuron is torch.neuron
    # the same device underneath (each name's parameters and returns: test_neuron_contract.py)
    assert torch_neuronx.device_count() == torch.neuron.device_count()
    x = torch.ones(4, device="neuron")
    torch_neuronx.synchronize()
    assert torch_neuronx.memory_allocated() >= x.nbytes


@pytest.mark.parametrize("name", NKI)
def test_nki_entry_points_say_they_need_trainium(neuron, name):
    import torch_neuronx

    with pytest.raises(AttributeError, match="NKI kernels compile for NeuronCores"):
        getattr(torch_neuronx, name)


def test_real_package_check_ignores_the_standin(neuron):
    assert importlib.util.find_spec("torch_neuronx") is not None
    assert torchferry.device.real_neuron_installed() is False


def test_real_package_check_sees_an_installed_distribution(run_python, tmp_path):
    # Metadata of an installed torch-neuronx wheel (no code needed): the built-in device stands aside.
    info = tmp_path / "torch_neuronx-2.13.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-neuronx\nVersion: 2.13.3.0\n")
    result = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import torchferry.device
        from torchferry.errors import DeviceConflictError
        assert torchferry.device.real_neuron_installed()
        try:
            torchferry.device.enable()
        except DeviceConflictError as exc:
            print("stands aside:", exc)
    """)
    assert result.returncode == 0, result.stderr
    assert "stands aside: torch-neuronx (the real TorchNeuron) is installed" in result.stdout


def test_hugging_face_libraries_detect_neuron_through_the_standin(run_python):
    result = run_python("""
        import torchferry.device
        torchferry.device.enable()
        from accelerate.utils import is_neuron_available
        from transformers.utils import is_torch_neuron_available
        print(is_neuron_available(), is_torch_neuron_available(check_device=True))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_standin_off_keeps_torch_neuronx_unfound(run_python):
    result = run_python("""
        import importlib.util
        import torchferry.device
        torchferry.device.enable()
        import torch
        from accelerate.utils import is_neuron_available
        print(torch.neuron.is_available(), importlib.util.find_spec("torch_neuronx"), is_neuron_available())
    """, env={"TORCHFERRY_STANDIN": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "None", "False"]


def test_bad_standin_setting_is_a_clear_error_before_anything_registers(run_python):
    result = run_python("""
        import torch, torchferry.device
        from torchferry.device._settings import DeviceSettingError
        try:
            torchferry.device.enable()
        except DeviceSettingError as exc:
            print(exc)
        print(torchferry.device.is_enabled(), torch._C._get_privateuse1_backend_name())
    """, env={"TORCHFERRY_STANDIN": "yes"})
    assert result.returncode == 0, result.stderr
    assert "TORCHFERRY_STANDIN='yes' is not 0 or 1" in result.stdout
    assert result.stdout.splitlines()[-1] == "False privateuseone"


def test_torch_neuron_namespace_exports_only_its_api(neuron):
    """No helper module of ours shows on torch.neuron (the contract test checks each name)."""
    import torchferry.device.neuron as module

    public = {name for name in vars(module) if not name.startswith("_")}
    assert public == set(module.__all__)
    assert not public & {"accounting", "devices", "random", "streams"}
    assert torch.neuron.memory.__name__ == "torchferry.device.neuron.memory"  # TorchNeuron's own submodule name
    for name in module.__all__:
        assert callable(getattr(torch.neuron, name)) or name == "memory", name
