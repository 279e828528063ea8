"""Device activity of the built-in device in torch.profiler: `ProfilerActivity.PrivateUse1`
records one device event per op the device ran (host-fallback ops marked), linked to its
CPU op; `profile_memory=True` attributes allocations to `neuron`; the Chrome trace has a
device track; the stand-in's `NeuronProfiler` writes the PyTorch trace where the real one does."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _workload() -> torch.Tensor:
    x = torch.randn(64, 64, device="neuron")
    y = (x @ x).relu()
    return torch.nonzero(y > 0)


def _device_events(prof) -> list:
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_privateuse1_activity_is_supported_once_enabled(neuron):
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_device_events_for_ops_run_on_the_device_linked_to_their_cpu_op(neuron):
    neuron.clear_op_tracking()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        _workload()
    device = _device_events(prof)
    names = {e.name for e in device}
    assert {"aten::mm", "aten::relu"} <= names, sorted(names)
    assert all(e.device_index == 0 for e in device)
    # Exactly the ops the target ran on the host are marked (which ones is the device profile's call).
    marked = {n.removesuffix(" [host fallback]") for n in names if n.endswith(" [host fallback]")}
    assert marked == set(neuron.get_fallback_ops()), (sorted(names), neuron.get_fallback_ops())
    assert not marked & set(neuron.get_executed_ops())
    mm = next(e for e in prof.key_averages() if e.key == "aten::mm" and e.cpu_time_total > 0)
    assert mm.device_time_total > 0, "the mm kernel's time is attributed to its CPU op"


def test_no_device_events_without_the_device_activity(neuron):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _workload()
    assert _device_events(prof) == []


def test_profile_memory_attributes_allocations_to_neuron(neuron):
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        keep = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
        host = torch.empty(1 << 10, dtype=torch.uint8)
    empties = [e for e in prof.events() if e.name == "aten::empty"]
    on_device = [e for e in empties if e.device_memory_usage >= keep.nbytes]
    assert len(on_device) == 1 and on_device[0].cpu_memory_usage == 0, \
        [(e.device_memory_usage, e.cpu_memory_usage) for e in empties]
    assert any(e.cpu_memory_usage >= host.nbytes and e.device_memory_usage == 0 for e in empties)
    assert prof.key_averages().total_average().device_memory_usage >= keep.nbytes


def test_chrome_trace_has_a_device_track(neuron, tmp_path):
    neuron.clear_op_tracking()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        _workload()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert any(e["name"] == "aten::mm" for e in kernels)
    assert {e["args"]["fallback"] for e in kernels} <= {"host", "none"}
    assert any(e["args"]["fallback"] == "host" for e in kernels) == bool(neuron.get_fallback_ops())
    assert all(e.get("args", {}).get("device") == "neuron:0" for e in kernels)
    cpu_pids = {e["pid"] for e in events if e.get("cat") == "cpu_op"}
    assert {e["pid"] for e in kernels}.isdisjoint(cpu_pids), "kernels sit on their own (device) track"


def test_standin_neuron_profiler_writes_the_pytorch_trace_into_the_output_dir(neuron, tmp_path):
    import torch_neuronx

    with torch_neuronx.NeuronProfiler(pytorch_activities=DEVICE_ACTIVITIES,
                                      neuron_output_dir=str(tmp_path / "out")) as prof:
        assert prof.is_active()
        _workload()
    trace = json.loads((tmp_path / "out" / "pytorch_trace.json").read_text())
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    assert prof.get_nrt_output_directory() == str(tmp_path / "out")
    assert prof.get_pytorch_trace() is not None and not prof.is_active()
