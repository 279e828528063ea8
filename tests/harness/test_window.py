"""The measurement window: everything it reads covers the span between opening and reading, and nothing else.

On the built-in device (an emulating device) it reads ops, fallbacks, memory, compile figures and
the predictions; on the CPU (which tracks nothing) only what the CPU reports, never an invented
figure. Dynamo's ``eager`` backend stands in for a compiler: the breaks are Dynamo's own.
"""

from __future__ import annotations

import json

import pytest
import torch

from torchferry.harness.window import HOST_COPY, Window, compile_records


@pytest.fixture(scope="module")
def neuron():
    import torchferry.device

    torchferry.device.enable()
    return torch.device("neuron")


def _fallback_op_call(device) -> None:
    """One op the trn2 profile runs on the host (`unique` has a data-dependent output size)."""
    torch.unique(torch.tensor([3, 1, 3, 2], device=device))


def test_cpu_reads_memory_and_nothing_it_does_not_report():
    device = torch.device("cpu")
    with Window(device) as window:
        torch.ones(4) + 1
    reading = window.reading
    assert reading.device == "cpu" and reading.memory.bytes > 0 and reading.memory.source == "host RSS"
    assert reading.ops is None and reading.compiled is None and reading.predictions is None


def test_ops_and_fallbacks_cover_the_window_alone(neuron):
    _fallback_op_call(neuron)  # before the window: must not count
    window = Window(neuron, clear=False)  # leave the counters alone: everything is a difference
    x = torch.ones(8, device=neuron)
    (x * 2).sum()
    _fallback_op_call(neuron)
    reading = window.read()
    assert reading.ops is not None and reading.ops.executed >= 2
    assert list(reading.ops.fallback) and all(n == 1 for n in reading.ops.fallback.values())
    assert reading.ops.fallback_share == pytest.approx(reading.ops.fallback_calls / reading.ops.executed, abs=1e-6)
    assert 0 < reading.ops.fallback_share < 1
    assert set(reading.predictions.fallback_reasons) == set(reading.ops.fallback)
    assert all(reading.predictions.fallback_reasons.values())  # every fallback says why


def test_a_window_without_work_reads_zero_not_the_process_totals(neuron):
    _fallback_op_call(neuron)
    reading = Window(neuron, clear=False).read()
    assert reading.ops.executed == 0 and reading.ops.fallback == {} and reading.ops.fallback_share == 0.0
    p = reading.predictions
    assert (p.signatures, p.compilations, p.calls, dict(p.host_syncs), dict(p.fallback_reasons)) == (0, 0, 0, {}, {})


def test_clear_resets_the_device_counters_and_the_peak(neuron):
    big = torch.empty(1 << 22, device=neuron)  # 16 MiB, freed before the window opens
    del big
    module = torch.get_device_module("neuron")
    window = Window(neuron)  # clear=True
    assert module.get_fallback_ops() == {} and sum(module.get_executed_ops().values()) == 0
    small = torch.ones(16, device=neuron)
    reading = window.read()
    assert reading.memory.source == "torch.neuron.max_memory_allocated"
    assert 0 < reading.memory.bytes < 1 << 22  # the window's peak, not the earlier 16 MiB
    del small


def test_predictions_of_the_emulated_target(neuron):
    with Window(neuron) as window:
        x = torch.arange(6, device=neuron, dtype=torch.float32)
        y = torch.sin(x) * 3  # a new op signature, at least
        y.sum().item()  # a host sync the user's code causes
        y.cpu()  # a device-to-host copy
    p = window.reading.predictions
    assert p.profile == "trn2" and p.capacity_bytes and p.capacity_bytes > 1 << 30
    assert p.numerics in ("target", "host")
    assert p.calls >= 2 and p.signatures >= 0 and p.signatures == p.compilations + p.cache_hits
    assert any(cause.endswith(HOST_COPY) for cause in p.host_syncs)
    assert p.syncs_beyond_copies() and not any(c.endswith(HOST_COPY) for c in p.syncs_beyond_copies())
    assert p.known_issues is None or all(i["calls"] > 0 for i in p.known_issues)  # None: the device keeps no list


def test_a_new_signature_is_counted_in_the_window_that_ran_it_and_not_the_next(neuron):
    shape = (3, 17, 5)  # a shape no other test uses: a signature new to this process
    with Window(neuron, clear=False) as first:
        torch.cos(torch.ones(shape, device=neuron))
    with Window(neuron, clear=False) as second:
        torch.cos(torch.ones(shape, device=neuron))
    assert first.reading.predictions.signatures >= 1
    assert second.reading.predictions.signatures == 0 and second.reading.predictions.calls >= 1


def test_cheap_counts_difference_to_the_full_readings_figures(neuron):
    """The script recorder differences ``counts()`` every step instead of full readings: the same figures."""
    window = Window(neuron, clear=False)
    before = window.counts()
    x = torch.ones((5, 19, 3), device=neuron)  # a shape no other test uses: a new signature
    torch.sin(x).sum()
    _fallback_op_call(neuron)
    span = window.counts().minus(before)
    reading = window.read()
    p = reading.predictions
    assert span.executed == reading.ops.executed >= 3
    assert {k: n for k, n in span.fallback.items() if n} == dict(reading.ops.fallback)
    assert (span.signatures, span.compilations, span.cache_hits) == (p.signatures, p.compilations, p.cache_hits)
    assert span.signatures >= 1 and {k: n for k, n in span.host_syncs.items() if n} == dict(p.host_syncs)
    taken_out = window.counts().minus(before, span)  # a span less itself leaves nothing
    assert taken_out.executed == 0 and taken_out.signatures == 0 and not any(taken_out.fallback.values())


class _Block(torch.nn.Module):
    def __init__(self, broken: bool):
        super().__init__()
        self.lin, self.broken = torch.nn.Linear(8, 8), broken

    def forward(self, x):
        h = self.lin(x)
        if self.broken:
            torch._dynamo.graph_break()  # the planted break
        return torch.tanh(h)


def _compiled(device, broken: bool, clear: bool = True):
    torch._dynamo.reset()
    model, x = _Block(broken).to(device), torch.randn(2, 8).to(device)
    window = Window(device, "eager", clear=clear)
    torch.compile(model, backend="eager")(x)
    return window.read().compiled


def test_a_graph_break_is_read_with_its_reason_and_the_users_line(neuron):
    compiled = _compiled(neuron, broken=True)
    assert compiled.backend == "eager" and compiled.graphs == 2 and compiled.fullgraph is False
    (brk,) = compiled.breaks
    assert "graph_break" in brk.reason and brk.count == 1
    assert brk.where.endswith("in forward") and "test_window.py:" in brk.where
    assert compiled.break_count == 1 and sum(compiled.counted_breaks.values()) == 1


def test_a_clean_compile_is_fullgraph_and_earlier_breaks_do_not_leak_in(neuron):
    _compiled(neuron, broken=True)
    compiled = _compiled(neuron, broken=False, clear=False)  # Dynamo's counters still hold the break
    assert compiled.graphs == 1 and compiled.breaks == () and compiled.break_count == 0 and compiled.fullgraph is True


def test_nothing_compiled_is_neither_fullgraph_nor_not():
    window = Window(torch.device("cpu"), "eager")
    compiled = window.read().compiled
    assert compiled.graphs == 0 and compiled.fullgraph is None and compiled.device_graphs is None


@pytest.mark.slow  # the neuron backend compiles through Inductor (~50 s on 2 cores)
def test_the_device_backends_graph_records_cover_the_window(neuron, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFERRY_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    model, x = _Block(False).to(neuron), torch.randn(2, 8).to(neuron)
    torch.compile(model, backend="neuron")(x)  # an earlier compilation: its record is not the window's
    before = len(compile_records(torch.get_device_module("neuron")))
    torch._dynamo.reset()
    window = Window(neuron, "neuron", clear=False)
    torch.compile(_Block(False).to(neuron), backend="neuron")(torch.randn(3, 8).to(neuron))
    compiled = window.read().compiled
    assert before >= 1 and compiled.device_graphs is not None and len(compiled.device_graphs) == 1
    (record,) = compiled.device_graphs
    assert record["graph_name"] and record["graph_node_count"] > 0 and "[3, 8]" in record["input_signature"]


def test_the_reading_is_plain_json(neuron):
    with Window(neuron, "eager") as window:
        torch.compile(_Block(True).to(neuron), backend="eager")(torch.randn(2, 8).to(neuron))
    data = json.loads(json.dumps(window.reading.to_dict()))
    assert data["device"] == "neuron" and data["compiled"]["breaks"][0]["count"] == 1
    assert data["predictions"]["profile"] == "trn2" and isinstance(data["ops"]["fallback"], dict)


def test_compile_records_read_a_list_of_record_objects_as_dicts():
    """TorchNeuron's get_dynamo_metrics() returns a list of records (objects, not dicts)."""
    from dataclasses import dataclass

    @dataclass
    class Record:
        graph_name: str
        graph_node_count: int

    class Module:
        @staticmethod
        def get_dynamo_metrics():
            return [Record("g0", 4), Record("g1", 7)]

    assert compile_records(Module) == [{"graph_name": "g0", "graph_node_count": 4},
                                       {"graph_name": "g1", "graph_node_count": 7}]
    assert compile_records(object()) is None


def test_known_issues_are_those_the_window_ran_with_the_windows_calls(neuron, monkeypatch):
    """The device lists its known issues since the last clear; the window keeps the ops whose calls grew in it."""
    import torchferry.device as api

    issues = [{"op": "aten::remainder", "kind": "fails", "calls": 2}, {"op": "aten::sort", "kind": "slow", "calls": 4}]
    monkeypatch.setattr(api, "known_issues", lambda: [dict(i) for i in issues], raising=False)
    window = Window(neuron, clear=False)
    issues[0]["calls"] = 5
    issues.append({"op": "aten::mm", "kind": "accuracy", "calls": 1})
    assert window.read().predictions.known_issues == ({"op": "aten::remainder", "kind": "fails", "calls": 3},
                                                       {"op": "aten::mm", "kind": "accuracy", "calls": 1})
    monkeypatch.delattr(api, "known_issues")
    assert Window(neuron, clear=False).read().predictions.known_issues is None  # a device that keeps no list


def test_a_compile_window_over_a_process_that_never_compiles_imports_no_dynamo():
    """An unchanged script's rehearsal opens its window with a compile backend (the script may call torch.compile
    anywhere); in a script that never does, reading it must not import Dynamo (a second of every run) and reads 0."""
    import subprocess
    import sys

    code = ("import sys, torch, torchferry.device; torchferry.device.enable()\n"
            "from torchferry.harness.window import Window\n"
            "w = Window(torch.device('neuron'), 'any', clear=False)\n"
            "torch.ones(2, device='neuron') + 1\n"
            "c = w.read().compiled\n"
            "print(c.graphs, c.break_count, len(c.device_graphs), 'torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == ["0", "0", "0", "False"]
