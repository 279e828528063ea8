"""The harness's case primitives: inputs on a device, copies, probes, the OOM rule and the typed capture."""

import pickle

import pytest
import torch

from torchferry.errors import NonFiniteError
from torchferry.harness import case
from torchferry.harness.case import Capture, ModelCase, ProbeCapture, RunCapture, StepPlan
from torchferry.harness.modes import Mode


def test_moved_casts_only_floating_tensors_and_keeps_the_containers():
    batch = {"ids": torch.arange(3), "x": torch.ones(2), "pair": (torch.ones(1), 7), "nested": {"y": torch.zeros(1)}}
    out = case.moved(batch, "meta", torch.float64)
    assert out["ids"].dtype == torch.int64 and out["ids"].device.type == "meta"
    assert out["x"].dtype == torch.float64 and out["nested"]["y"].dtype == torch.float64
    assert isinstance(out["pair"], tuple) and out["pair"][1] == 7 and out["pair"][0].dtype == torch.float64
    assert case.moved(batch, dtype=torch.float64)["x"].device.type == "cpu"  # no device: the cast alone


def test_fresh_copies_leave_the_pristine_model_alone():
    pristine = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    golden = case.fresh(pristine, "cpu", inference=True, fp64=True)
    assert golden[0].weight.dtype == torch.float64 and not golden.training
    assert pristine.training and pristine[0].weight.dtype == torch.float32
    train = case.fresh(pristine, "cpu", inference=False)
    assert train.training and train[0].weight is not pristine[0].weight


def test_probe_modules_records_each_modules_first_floating_output_in_execution_order():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    output, modules = case.probe_modules(model, lambda m: m(torch.ones(1, 2)))
    assert list(modules) == ["0", "1", "<model>"]  # a forward hook fires when its module returns
    assert torch.equal(modules["1"], output) and not model._forward_hooks and not model[0]._forward_hooks


def test_the_oom_rule_tells_this_hosts_memory_from_the_targets():
    device_oom = torch.OutOfMemoryError("neuron: out of memory, tried to allocate 2 GiB")
    host_oom = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GiB")
    assert case.is_oom(device_oom) and not case.is_host_oom(device_oom)
    assert case.is_oom(host_oom) and case.is_host_oom(host_oom)
    assert not case.is_oom(ValueError("shape mismatch"))


def test_a_capture_round_trips_through_a_weights_only_load(tmp_path):
    ref = Capture(run=RunCapture(losses=[1.0, 0.5], times=[0.1, 0.1], grads={"w": torch.ones(2)}),
                  probe=ProbeCapture(outputs={"logits": torch.ones(3)}, modules={"<model>": torch.ones(3)}))
    ref.golden = Capture(run=RunCapture(losses=[1.0, 0.5], grads={"w": torch.ones(2, dtype=torch.float64)}),
                         probe=ProbeCapture(outputs={}, modules={}))
    ref.eval_outputs = {"logits": torch.zeros(3)}
    ref.save(tmp_path / "ref.pt")
    loaded = Capture.load(tmp_path / "ref.pt")  # weights_only=True: plain containers of tensors on disk
    assert loaded.run.losses == [1.0, 0.5] and torch.equal(loaded.run.grads["w"], torch.ones(2))
    assert loaded.golden.run.grads["w"].dtype == torch.float64 and loaded.golden.golden is None
    assert torch.equal(loaded.eval_outputs["logits"], torch.zeros(3)) and loaded.run.tokens is None
    torch.save({"run": Exception("not a tensor")}, tmp_path / "bad.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        Capture.load(tmp_path / "bad.pt")  # a Python object is refused, not unpickled


# -- ModelCase: a workload on one device, as check's workers run it -----------------------------------
def test_training_runs_capture_losses_times_and_first_gradients_on_the_cpu(mlp_case):
    case = mlp_case(Mode.TRAIN)
    run, opt = case.run(case.fresh())
    assert isinstance(opt, torch.optim.AdamW) and len(run.losses) == len(run.times) == 3 and run.tokens is None
    assert run.grads and all(g.device.type == "cpu" for g in run.grads.values())
    assert case.run(case.fresh(fp64=True), fp64=True)[0].grads["0.weight"].dtype == torch.float64
    assert case.run(case.fresh())[0].losses == run.losses  # every run starts from the pristine weights


def test_a_non_finite_forward_names_its_first_non_finite_module(mlp_case):
    case = mlp_case(Mode.FORWARD)
    model = case.fresh()
    with torch.no_grad():
        model[0].weight.fill_(float("nan"))
    case.pristine = model  # every fresh copy (the diagnosis probes one) carries the NaN weights
    with pytest.raises(NonFiniteError, match=r"NaN/Inf at step 1; first module with a non-finite output: '0'"):
        case.run(case.fresh())


# -- the plan's parameters where coverage measures otherwise (one step loop for both commands) ---------------
def test_an_sgd_plan_on_a_repeated_batch_keeps_losses_as_tensors_and_the_first_steps_gradients(mlp_case, monkeypatch):
    case = mlp_case(Mode.TRAIN, steps=2, optimizer="sgd", lr=1e-2, same_batch=True, in_process=True)
    built = []
    batch = case.batch
    monkeypatch.setattr(case, "batch", lambda index, fp64=False: built.append(index) or batch(index, fp64))
    model = case.fresh()
    run, opt = case.run(model)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["lr"] == 1e-2 and built == [0]  # one batch, built once
    assert run.losses == [] and [t.shape for t in run.outputs] == [torch.Size([])] * 2
    assert run.outputs[1] < run.outputs[0]  # the optimizer stepped on the same batch between them
    first = mlp_case(Mode.TRAIN, steps=1, optimizer=None, in_process=True)
    one = first.run(first.fresh())[0]
    assert run.grads.keys() == one.grads.keys()
    assert all(torch.equal(run.grads[n], one.grads[n]) for n in one.grads)  # step 1's, not step 2's


def test_a_plan_without_an_optimizer_runs_forward_and_backward_and_keeps_the_parameters_own_gradients(mlp_case):
    case = mlp_case(Mode.TRAIN, steps=1, optimizer=None, in_process=True)
    model = case.fresh()
    run, opt = case.run(model)
    assert opt is None and len(run.outputs) == 1
    assert all(run.grads[n] is p.grad for n, p in model.named_parameters())  # no copy of a large model's gradients
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), case.pristine.parameters()))  # no step taken


def test_the_generators_are_seeded_each_step_or_once_per_run_as_the_plan_says(mlp_case, monkeypatch):
    for plan, expected in (({}, [0, 1, 2]), ({"seed_each_step": False}, [0])):
        case = mlp_case(Mode.FORWARD, **plan)
        seeded = []
        monkeypatch.setattr(case, "seed_step", seeded.append)
        case.run(case.fresh())
        assert seeded == expected, plan


def test_an_in_process_forward_keeps_every_output_and_leaves_a_nan_to_the_parity_rule(mlp_case):
    case = mlp_case(Mode.FORWARD, steps=2, inference_mode=False, in_process=True)
    model = case.fresh()
    with torch.no_grad():
        model[0].weight.fill_(float("nan"))
    with case.no_grad():
        assert not torch.is_grad_enabled() and not torch.is_inference_mode_enabled()  # torch.no_grad, as asked
    run, _ = case.run(model)  # no NonFiniteError: the parity rule judges a NaN in this process
    assert len(run.outputs) == 2 and bool(torch.isnan(run.outputs[0]).all())
    assert not run.outputs[0].is_inference()


def test_generate_arguments_add_the_workloads_options_and_a_static_cache_only_where_the_plan_keeps_it():
    class Workload:
        model = torch.nn.Linear(1, 1)

        def generate_options(self, model):
            return {"output_scores": True}

    class Static(torch.nn.Linear):
        _can_compile_fullgraph = True  # transformers' mark of a model that takes a static cache

    plan = StepPlan(mode=Mode.GENERATE, seed=0, steps=1, new_tokens=3)
    kwargs = ModelCase(Workload(), torch.device("cpu"), plan).generate_kwargs(Static(1, 1), {"input_ids": 1})
    assert kwargs == {"input_ids": 1, "max_new_tokens": 3, "do_sample": False, "output_scores": True,
                      "cache_implementation": "static"}
    dynamic = StepPlan(mode=Mode.GENERATE, seed=0, steps=1, static_cache=False)
    assert "cache_implementation" not in ModelCase(Workload(), torch.device("cpu"), dynamic).generate_kwargs(Static(1, 1), {})


def test_an_unknown_optimizer_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match=r"'adam' is not one of adamw, sgd or None"):
        StepPlan(mode=Mode.TRAIN, seed=0, steps=1, optimizer="adam")
