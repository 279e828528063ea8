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
    assert device == torch.device("cpu") and peak["bytes"] > 0 and peak["source"]


def test_unknown_device_type_is_unavailable_with_the_valid_names():
    with pytest.raises(DeviceUnavailableError, match="not usable here.*Available: .*cpu"):
        devices.resolve("warpdrive")


def test_default_target_always_names_a_device_and_why():
    name, why = devices.default_target()
    assert name and why


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
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot be shown here")
    with pytest.raises(DeviceUnavailableError, match="'cuda' is not available here"):
        devices.check_usable("cuda")
    devices.check_usable("cpu")
    assert torch._C._get_privateuse1_backend_name() in ("privateuseone", "neuron")


def test_check_usable_names_unknown_devices():
    with pytest.raises(DeviceUnavailableError, match="unknown device 'warpdrive'"):
        devices.check_usable("warpdrive")
