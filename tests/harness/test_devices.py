"""Device resolution and the device-agnostic rule (no torch.cuda in the harness)."""

from pathlib import Path

import pytest
import torch

from torchferry.harness import devices
from torchferry.errors import DeviceUnavailableError

PACKAGE = Path(devices.__file__).parents[1]


def test_cpu_resolves_synchronises_and_reports_peak_memory():
    device = devices.resolve("cpu")
    devices.synchronize(device)
    peak = devices.peak_memory(device)
    assert device == torch.device("cpu") and peak.bytes > 0 and peak.source == "host RSS"


def test_unknown_device_type_is_unavailable_with_the_valid_names():
    with pytest.raises(DeviceUnavailableError, match="not usable here.*Available: .*cpu"):
        devices.resolve("warpdrive")


def test_default_target_prefers_real_neuron_then_the_accelerator_then_the_builtin_device_then_cpu(monkeypatch):
    """Each branch of the order, forced: a real torch-neuronx wins, then the current accelerator, then
    torchferry's built-in device, and the CPU only when none exists (saying so and how to choose)."""
    import torchferry.device

    class Accelerator:
        type = "xpu"

    monkeypatch.setattr(torchferry.device, "real_neuron_installed", lambda: True)
    assert devices.default_target() == ("neuron", "torch_neuronx is installed")
    monkeypatch.setattr(torchferry.device, "real_neuron_installed", lambda: False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: Accelerator())
    assert devices.default_target() == ("xpu", "current accelerator is 'xpu'")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(devices, "builtin_device_present", lambda: True)
    assert devices.default_target() == ("neuron", "torchferry's built-in neuron device")
    monkeypatch.setattr(devices, "builtin_device_present", lambda: False)
    name, why = devices.default_target()
    assert name == "cpu" and "checking cpu against cpu" in why and "--target" in why


@pytest.mark.parametrize("folder", ["check", "coverage", "harness", "workloads", "report"])
def test_harness_never_calls_torch_cuda(folder):
    offenders = [p.name for p in (PACKAGE / folder).rglob("*.py") if "torch.cuda." in p.read_text()]
    assert offenders == []


def test_importing_the_command_module_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, torchferry.check.command, torchferry.coverage.command, torchferry.cli; "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=PACKAGE.parent)
    assert proc.stdout.strip() == "False", proc.stderr


def test_check_usable_refuses_an_absent_accelerator_without_registering_anything():
    # an accelerator type torch knows but this machine lacks (every machine lacks at least one of them)
    absent = next(t for t in ("cuda", "xpu", "mps") if not torch.get_device_module(t).is_available())
    with pytest.raises(DeviceUnavailableError, match=f"'{absent}' is not available here"):
        devices.check_usable(absent)
    devices.check_usable("cpu")
    assert torch._C._get_privateuse1_backend_name() in ("privateuseone", "neuron")


def test_check_usable_names_unknown_devices():
    with pytest.raises(DeviceUnavailableError, match="unknown device 'warpdrive'"):
        devices.check_usable("warpdrive")
