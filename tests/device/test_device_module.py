"""torch.neuron is shaped like torch.cuda: devices, properties, streams and events."""

import time

import pytest
import torch


def test_device_functions(neuron):
    assert neuron.is_available() and neuron.device_count() == 1
    assert neuron.current_device() == 0
    neuron.set_device(0)
    with pytest.raises(ValueError, match="valid: 0..0"):
        neuron.set_device(3)
    props = neuron.get_device_properties("neuron:0")
    assert props.total_memory > 0 and "trn2" in props.name
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == 1


def test_tensor_and_module_methods(neuron):
    t = torch.zeros(2).neuron()
    assert t.is_neuron and t.device.type == "neuron"
    m = torch.nn.Linear(2, 2).neuron()
    assert next(m.parameters()).device.type == "neuron"


def test_device_count_from_visible_cores(run_python):
    result = run_python(
        "import torchferry.device as d; d.enable(); import torch; print(torch.neuron.device_count(), torch.accelerator.device_count())",
        env={"NEURON_RT_VISIBLE_CORES": "0-3"},
    )
    assert result.stdout.split() == ["4", "4"], result.stderr


def test_events_measure_elapsed_time(neuron):
    start, end = neuron.Event(enable_timing=True), neuron.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15.0 <= start.elapsed_time(end) < 2000.0


def test_unrecorded_event_elapsed_time_raises(neuron):
    with pytest.raises(ValueError, match="recorded"):
        neuron.Event(enable_timing=True).elapsed_time(neuron.Event(enable_timing=True))


def test_streams_can_be_created_set_and_synchronised(neuron):
    s = neuron.Stream()
    assert s.device.type == "neuron" and s.stream_id != 0
    with neuron.stream(s):
        assert neuron.current_stream().stream_id == s.stream_id
        torch.ones(2, device="neuron").add_(1)
    assert neuron.current_stream().stream_id == neuron.default_stream().stream_id == 0
    s.synchronize()
    neuron.synchronize()
    torch.accelerator.synchronize()


def test_autocast_bfloat16_and_float16(neuron):
    lin = torch.nn.Linear(8, 8).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("neuron", dtype=dtype):
            y = lin(x)
            s = torch.softmax(y, -1)  # fp32 policy op
        assert y.dtype == dtype and s.dtype == torch.float32
    assert lin(x).dtype == torch.float32
