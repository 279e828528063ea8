"""The rehearsal result on purpose-built workloads (tests/check/fixtures), each with a clean twin.

The workloads run in this process on the built-in device with the target worker's own recorder
(check/rehearsal.py ``Recorder``, reading the harness's measurement window), and ``judge`` judges the record: the same path as
``ferry check``, without the worker processes. tests/check/test_rehearsal_check.py runs a few of
them end to end.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from torchferry.check import rehearsal
from torchferry.check.rehearsal import Recorder, placement_of
from torchferry.harness import devices
from torchferry.harness.window import Window
from torchferry.report.check import RehearsalResult
from torchferry.workloads.protocol import load_workload

pytestmark = pytest.mark.slow  # trains and compiles the fixture workloads on the built-in device (minutes on 2 cores)

FIXTURES = Path(__file__).with_name("fixtures")
STEPS = 5


@pytest.fixture(scope="module")
def device():
    import torchferry.device

    torchferry.device.enable()
    return torch.device("neuron")


@pytest.fixture
def compile_env(device, tmp_path, monkeypatch):
    """A clean Dynamo state, compile metrics from zero and private compile caches."""
    monkeypatch.setenv("TORCHFERRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def workload(name: str, attr: str = "build"):
    return load_workload(f"{FIXTURES / (name + '.py')}:{attr}", {})


def train_step(w, model, opt, batch) -> None:
    opt.zero_grad(set_to_none=True)
    w.loss_of(w.forward(model, batch), batch).backward()
    opt.step()


def forward_step(w, model, opt, batch) -> None:
    with torch.no_grad():
        w.forward(model, batch)


def rehearse(device, tmp_path, name: str, attr: str = "build", steps: int = STEPS, compiled: bool = False,
             step=train_step) -> RehearsalResult:
    """``steps`` steps (training, or ``forward_step``) of a fixture as the target worker records them, judged."""
    w = workload(name, attr)
    window = Window(device, "neuron" if compiled else None)
    model = copy.deepcopy(w.model).to(device)
    run = torch.compile(model, backend="neuron") if compiled else model
    opt = torch.optim.AdamW(model.parameters())
    record = Recorder(tmp_path / rehearsal.RECORD, device)
    for index in range(steps):
        batch = w.batch(device, index)
        with record.watch(batch):
            step(w, run, opt, batch)

    def fresh_step() -> None:
        fresh = copy.deepcopy(w.model).to(device)
        step(w, fresh, torch.optim.AdamW(fresh.parameters()), w.batch(device, 0))

    record.finish(fresh_step, window.read())
    return rehearsal.judge(rehearsal.load(tmp_path / rehearsal.RECORD))


def judged(record: dict) -> RehearsalResult:
    """A record written as the recorder writes it, judged."""
    return rehearsal.judge(rehearsal.RehearsalRecord.from_dict(record))


def conditions(r: RehearsalResult, head: str) -> list[str]:
    return [c for c in r.conditions if c.startswith(head)]


def test_the_built_in_device_says_it_emulates_its_profile(device):
    assert devices.emulates(device) == "trn2"
    assert devices.emulates(torch.device("cpu")) is None


def test_a_boolean_mask_index_syncs_the_host_each_step_and_where_does_not(device, tmp_path):
    masked = rehearse(device, tmp_path, "bool_mask")
    assert all(step.get("aten::index.Tensor (boolean mask)") == 1 for step in masked.host_syncs_per_step)
    [sync] = conditions(masked, "host syncs for data-dependent output sizes")
    assert "aten::index.Tensor (boolean mask) x1/step" in sync and "torch.where" in sync
    clean = rehearse(device, tmp_path, "bool_mask", "build_clean")
    assert clean.conditions == [] and clean.status == "clean"


def test_linalg_qr_is_a_predicted_host_fallback_with_its_reason_and_source(device, tmp_path):
    r = rehearse(device, tmp_path, "qr")
    qr = {f.op: f for f in r.fallbacks}["aten::linalg_qr"]
    assert qr.calls == STEPS  # the timed steps' calls (the profiled step comes after the count)
    assert "explicit CPU fallback" in qr.reason and "cpu_fallback_registrations.py" in qr.reason
    assert 0 < qr.share_of_calls < 1 and qr.share_of_time is not None and 0 < qr.share_of_time < 1
    assert r.fallback_share_of_time is not None and r.fallback_share_of_time >= qr.share_of_time
    assert conditions(r, "1 op(s) predicted to run on the host") or conditions(r, f"{len(r.fallbacks)} op(s) predicted")
    clean = rehearse(device, tmp_path, "qr", "build_clean")
    assert clean.fallbacks == [] and clean.conditions == [] and clean.fallback_share_of_time is None


def test_five_lengths_in_eager_mode_are_shape_churn_named_with_the_changing_input(device, tmp_path):
    r = rehearse(device, tmp_path, "lengths")
    assert r.signatures_step1 and all(n > 0 for n in r.new_signatures), r.new_signatures
    assert r.shape_changes == ["ids: [3, 5] -> [3, 9] -> [3, 14] -> [3, 20] -> [3, 27]"]
    [churn] = conditions(r, "shape churn")
    assert f"in {STEPS - 1} of {STEPS - 1} steps" in churn and "ids: [3, 5] -> [3, 9]" in churn
    clean = rehearse(device, tmp_path, "lengths", "build_clean")
    assert clean.new_signatures == [0] * (STEPS - 1) and clean.shape_changes == [] and clean.conditions == []


@pytest.mark.slow  # ~40 s on 2 busy cores: six graphs through Inductor's CPU code generation, cold
def test_five_lengths_under_compile_give_one_graph_per_length_named_with_the_changing_input(device, tmp_path,
                                                                                           compile_env):
    r = rehearse(device, tmp_path, "lengths", compiled=True, step=forward_step)  # inference graphs: half the compiling
    [frame] = [f for f in r.compile.frames if f.graphs > 1]
    assert frame.graphs == STEPS and frame.recompiles == STEPS - 1
    assert any("[3, 5]" in c and "[3, 27]" in c for c in frame.changing_inputs), frame.changing_inputs
    [condition] = conditions(r, f"compiled frame {frame.frame} has {STEPS} graphs")
    assert "ids: [3, 5]" in condition
    assert r.new_signatures == [0] * (STEPS - 1), "nothing runs eagerly: no eager churn"
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    clean = rehearse(device, tmp_path, "lengths", "build_clean", compiled=True, step=forward_step)
    assert clean.compile.frames and all(f.graphs == 1 for f in clean.compile.frames)
    assert clean.conditions == []


def test_int64_overflow_changes_the_targets_result_and_the_clean_twin_does_not(device):
    """Under target numerics int64 wraps as int32: the hash overflows, its buckets differ from the CPU's.
    (tests/check/test_rehearsal_check.py shows the rerun under host numerics explaining the parity failure.)"""
    from torchferry.device import target

    assert target.numerics() == "target"
    for attr, differs in (("build", True), ("build_clean", False)):
        w = workload("int64_overflow", attr)
        batch = w.batch("cpu", 0)
        with torch.no_grad():
            cpu = w.forward(w.model, batch)
            on_device = w.forward(copy.deepcopy(w.model).to(device), w.batch(device, 0)).cpu()
        assert (not torch.equal(cpu, on_device)) is differs, attr


def test_a_placement_error_names_the_op_and_the_users_line(device):
    w = workload("placement")
    model = copy.deepcopy(w.model).to(device)
    with pytest.raises(RuntimeError) as info:
        w.forward(model, w.batch(device, 0))
    p = placement_of(info.value)
    assert p.op == "aten::add.Tensor" and set(p.devices) == {"neuron:0", "cpu"}
    assert p.file.endswith("fixtures/placement.py") and p.code == "return self.fc(x) + self.offset"
    clean = workload("placement", "build_clean")
    clean.forward(copy.deepcopy(clean.model).to(device), clean.batch(device, 0))  # the buffer moved with the model
    assert placement_of(ValueError("the user's forward is broken")) is None


def test_an_indexed_write_through_a_host_mask_is_a_placement_error_naming_the_op_and_the_users_line(device):
    x = torch.zeros(4, device=device)
    with pytest.raises(RuntimeError) as info:
        x[torch.tensor([True, False, True, False])] = 1.0  # TorchNeuron refuses the CPU mask (host_index_writes)
    p = placement_of(info.value)
    assert p.op == "aten::_index_put_impl_" and p.devices == ["neuron", "cpu"] and p.argument == "arg1[0]"
    assert p.file == __file__ and "x[torch.tensor([True, False, True, False])] = 1.0" in p.code
    assert p.message == "Non-scalar tensor arg1[0] is on cpu device, expected neuron"
    real = placement_of(RuntimeError("Non-scalar tensor arg1[0] is on cpu device, expected neuron"))  # TorchNeuron's own
    assert real.op == "an op" and real.argument == "arg1[0]"


def test_a_placement_error_under_compile_names_the_users_line_from_the_traced_frame(device, compile_env):
    w = workload("placement")
    compiled = torch.compile(copy.deepcopy(w.model).to(device), backend="neuron")
    with pytest.raises(RuntimeError) as info:  # Dynamo raises while tracing: the user's frame is not in the traceback
        w.forward(compiled, w.batch(device, 0))
    p = placement_of(info.value)
    assert p.file.endswith("fixtures/placement.py") and p.code == "return self.fc(x) + self.offset"
    assert set(p.devices) == {"neuron:0", "cpu"}


@pytest.mark.parametrize("name", ["skipped_param", "extra_state", "lora"])
def test_workloads_whose_findings_are_elsewhere_give_no_rehearsal_condition(device, tmp_path, name):
    """A skipped parameter fails parity, a device in ``_extra_state`` and a LoRA adapter are exit-check
    findings: nothing the rehearsal predicts stands in their way."""
    if name == "lora":
        pytest.importorskip("peft", reason="peft is in the test extras")
    r = rehearse(device, tmp_path, name, steps=2)
    assert r.status == "clean" and r.conditions == [], r.conditions
    assert r.signatures_step1 and r.new_signatures == [0]


# ops TorchNeuron 98154b8 does not register (profiles/trn2_ops.toml) that a DDPM step of UNet2DModel runs
UNET_FALLBACKS = {"aten::native_group_norm", "aten::native_group_norm_backward", "aten::upsample_nearest2d",
                  "aten::upsample_nearest2d_backward", "aten::mse_loss", "aten::mse_loss_backward"}


def test_a_diffusers_unet_predicts_its_host_fallbacks(device, tmp_path):
    pytest.importorskip("diffusers", reason="diffusers is in the test extras")
    r = rehearse(device, tmp_path, "unet", steps=2)
    assert r.new_signatures == [0] and not conditions(r, "shape churn")
    ops = {f.op for f in r.fallbacks}
    assert ops == UNET_FALLBACKS, sorted(ops)
    assert all("not implemented in TorchNeuron" in f.reason for f in r.fallbacks)
    [condition] = conditions(r, f"{len(UNET_FALLBACKS)} op(s) predicted to run on the host")
    assert "aten::native_group_norm x" in condition


def test_peak_memory_near_one_devices_capacity_is_a_condition():
    record = {"emulates": "trn2", "numerics": "target", "steps": [], "capacity_bytes": 100, "peak_bytes": 95}
    assert judged(record).conditions[0].startswith("peak device memory")
    assert judged({**record, "peak_bytes": 50}).conditions == []


def test_a_known_issue_that_fails_on_the_target_is_a_condition_and_an_accuracy_one_is_listed_only():
    """Known issues are their own kind: ``fails``/``slow`` make a condition (go-with-conditions), ``accuracy``
    (the vendor's bf16 op-test mismatches, on ops nearly every model runs) is listed with no condition."""
    fails = {"op": "aten::remainder", "kind": "fails", "calls": 3, "reason": "neuronx-cc compilation error",
             "scope": "skip in every op test class", "source": "tests/vertical/skip_xfail_ops.py (NEURON_SKIP_OPS)"}
    accuracy = {**fails, "op": "aten::mm", "kind": "accuracy", "reason": "dtype mismatch bfloat16 vs float32"}
    record = {"emulates": "trn2", "numerics": "target", "capacity_bytes": None, "steps": [], "read": True,
              "executed_calls": 10, "fallback_ops": {}, "known_issues": [fails, accuracy]}
    result = judged(record)
    assert result.status == "conditions" and [k.op for k in result.known_issues] == ["aten::remainder", "aten::mm"]
    [condition] = result.conditions
    assert condition.startswith("known issues: 1 op(s) that TorchNeuron's own CI skips as failing or slow")
    assert "aten::remainder x3 (neuronx-cc compilation error)" in condition
    assert any("aten::mm" in note for note in result.notes)
    only_accuracy = judged({**record, "known_issues": [accuracy]})
    assert only_accuracy.status == "clean" and only_accuracy.conditions == [] and only_accuracy.known_issues


def test_a_host_sync_of_an_op_the_target_runs_is_named_with_its_reason_and_fix():
    """TorchNeuron's one_hot reads its indices' range on the host each call: the condition says why and what to use."""
    why = "the host reads the indices' largest and smallest values first; comparing with torch.arange(num_classes)"
    step = {"signatures": 3, "compilations": 3, "cache_hits": 0, "host_syncs": {"aten::one_hot": 1}}
    record = {"emulates": "trn2", "numerics": "target", "capacity_bytes": None, "steps": [step, {**step, "signatures": 0}],
              "sync_reasons": {"aten::one_hot": why}}
    [sync] = conditions(judged(record), "host syncs for data-dependent output sizes")
    assert f"aten::one_hot x1/step ({why})" in sync


def _steps(*new: int) -> list[dict]:
    return [{"signatures": n, "compilations": n, "cache_hits": 0, "host_syncs": {}} for n in (20, *new)]


def test_new_signatures_in_early_steps_only_are_one_time_compilations_not_churn():
    """SGD's momentum and an EMA's update run new code paths at steps 2 and 3, then nothing new for five steps: a
    warm-up, noted; it was 'shape churn' with the advice to pad inputs. New ones still appearing late are churn."""
    record = {"emulates": "trn2", "numerics": "target", "capacity_bytes": None}
    warm = judged({**record, "steps": _steps(5, 4, 0, 0, 0, 0, 0)})
    assert not [c for c in warm.conditions if c.startswith("shape churn")], warm.conditions
    assert any("in 2 of 7 steps after step 1" in n and "not churn" in n for n in warm.notes), warm.notes
    late = judged({**record, "steps": _steps(5, 0, 0, 3, 0, 2, 0)})
    assert any(c.startswith("shape churn: new eager op signatures in 3 of 7 steps") for c in late.conditions)
    once = judged({**record, "steps": _steps(0, 0, 0, 0, 6, 0, 0)})  # one new path mid-run (an eval): neither
    assert not once.conditions and not any("not churn" in n for n in once.notes)


def test_a_graph_signature_splits_into_its_inputs():
    assert rehearsal.split_signature("neuron:float32[2, 8], neuron:int64[3], int") == [
        "neuron:float32[2, 8]", "neuron:int64[3]", "int"]


def test_a_target_that_emulates_nothing_is_not_rehearsed(tmp_path):
    from checkcfg import make_config

    from torchferry.report.check import ParityResult

    r = rehearsal.result(rehearsal.load(tmp_path / rehearsal.RECORD), make_config(tmp_path), ParityResult())
    assert r.status == "not-run" and "does not emulate" in r.notes[0]


def test_compiled_frames_and_placement_render_in_the_terminal_and_html():
    """The frame table, the placement row and the numerics note, from a judged record (renderers only)."""
    from torchferry.report import htmlreport, text
    from torchferry.report.check import CheckReport, NumericsRehearsal
    from torchferry.report.meta import Meta

    record = {"emulates": "trn2", "numerics": "target", "capacity_bytes": 2**30, "read": True, "executed_calls": 10,
              "peak_bytes": 1,
              "fallback_ops": {}, "steps": [{"signatures": 4, "compilations": 4, "cache_hits": 0, "host_syncs": {},
                                             "inputs": {"ids": [3, 5]}}],
              "known_issues": [{"op": "aten::remainder", "kind": "fails", "calls": 2, "reason": "neuronx-cc compilation error",
                                "scope": "skip in every op test class", "source": "tests/vertical/skip_xfail_ops.py"}],
              "compile": {"graph_breaks": [], "graphs": [
                  {"kind": "forward", "compile_id": "0/0", "input_signature": "neuron:int64[3, 5], neuron:float32[31, 12]"},
                  {"kind": "backward", "compile_id": "0/0", "input_signature": "neuron:int64[3, 5], neuron:float32[31, 12]"},
                  {"kind": "forward", "compile_id": "0/1", "input_signature": "neuron:int64[3, 9], neuron:float32[31, 12]"}]},
              "placement": {"op": "aten::add.Tensor", "devices": ["neuron:0", "cpu"], "argument": "other", "file": "m.py",
                            "line": 3, "code": "x + y", "message": "Expected all tensors to be on the same device"}}
    numerics = NumericsRehearsal(mode="target", rerun=True, host_parity="pass", explains=True,
                                 first_diverging_module="embed", note="parity passes under host numerics")
    result = rehearsal.judge(rehearsal.RehearsalRecord.from_dict(record), numerics)
    assert result.status == "fail" and result.compile.frames[0].graphs == 2
    assert result.compile.frames[0].changing_inputs == ["graph input 0: neuron:int64[3, 5] -> neuron:int64[3, 9]"]
    report = CheckReport(meta=Meta(format="torchferry.check", format_version=4, created="", command="", wall_s=0.0),
                         environment={}, config={"ref": "cpu", "target": "neuron", "source": {"kind": "workload"}},
                         subject="w (train, float32, 1 steps, size tiny) cpu -> neuron", rehearsal=result)
    out = text.render(report)
    assert "frame 0: 2 graphs, 1 recompiles" in out and "aten::add.Tensor mixes neuron:0, cpu at m.py:3: x + y" in out
    assert "host-numerics rerun: pass; first module narrowing changes: embed" in out
    assert ("known issue (fails): aten::remainder x2: neuronx-cc compilation error (skip in every op test class; "
            "tests/vertical/skip_xfail_ops.py)") in out
    html = htmlreport.render(report)
    assert "graph input 0: neuron:int64[3, 5] -&gt; neuron:int64[3, 9]" in html
    assert "<h3>Known issues (the vendor's own CI skips these ops)</h3>" in html and "<td>aten::remainder</td>" in html
