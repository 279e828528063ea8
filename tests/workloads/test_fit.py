"""A model named by the user is sized before anything is built, with `ferry plan`'s own estimate: a model that does not
fit the target's devices or this host is refused with both sides' numbers and the fixes (exit 6, not a failed
allocation filed as the workload's error minutes later), and shrunk only when a size is asked for."""

from __future__ import annotations

import json
import os

import pytest
from ferryrun import ferry

from torchferry.errors import DeviceOutOfMemoryError
from torchferry.status import ExitStatus
from torchferry.workloads.footprint import fit

# A Llama whose training step's peak is about 75 MiB on FakeTensor (float32 weights, gradients, AdamW).
SMALL = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 2048, "tie_word_embeddings": False}


@pytest.fixture
def small(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.json").write_text(json.dumps(SMALL))
    return tmp_path


def refused(*argv: str) -> tuple[int, str, str]:
    code, _, stderr = ferry("check", *argv, "-o", "out")
    assert "Traceback" not in stderr
    return code, stderr.splitlines()[0], stderr


@pytest.fixture
def device_of_32_mib(monkeypatch):
    """The target's capacity as a process that has not registered the built-in device reads it (the CLI's), whatever
    an earlier test of this process registered."""
    capacity = fit.Capacity(32 * 2**20, True, "TORCHFERRY_DEVICE_MEMORY=32MiB")
    monkeypatch.setattr(fit, "target_capacity", lambda name: capacity)
    return capacity


def test_the_built_in_devices_capacity_is_its_profiles_or_the_variable_without_registering_it(tmp_path):
    import subprocess
    import sys

    code = ("from torchferry.workloads.footprint.fit import target_capacity; import torch; c = target_capacity('neuron');"
            "print(c.bytes, c.host_memory, c.source, torch._C._get_privateuse1_backend_name())")
    def capacity(**environ) -> str:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**{k: v for k, v in os.environ.items() if k != "TORCHFERRY_DEVICE"}, **environ})
        return run.stdout.strip()

    assert capacity() == f"{24 * 2**30} True the device profile trn2's memory_bytes privateuseone"
    assert capacity(TORCHFERRY_DEVICE_MEMORY="32MiB") == f"{32 * 2**20} True TORCHFERRY_DEVICE_MEMORY=32MiB privateuseone"


def test_a_model_over_the_devices_capacity_is_refused_with_both_numbers_before_any_worker(small, device_of_32_mib):
    code, line, _ = refused("-w", "small.json", "--target", "neuron")
    assert code == ExitStatus.OUT_OF_MEMORY and not (small / "out" / "work").exists()
    assert line.startswith("ferry check: model 'small.json' does not fit, so nothing was built: a training step needs "
                           "75 MiB on each neuron device, over its 32 MiB (TORCHFERRY_DEVICE_MEMORY=32MiB)")
    assert ("--size tiny, small or base shrinks this one to a built-in size" in line
            and "`ferry plan -w small.json`" in line)


def test_a_model_over_this_hosts_memory_is_refused_naming_what_the_host_has(small, monkeypatch):
    monkeypatch.setattr(fit, "host_available", lambda: (100 * 2**20, "the test's host"))
    code, line, _ = refused("-w", "small.json", "--target", "cpu")
    assert code == ExitStatus.OUT_OF_MEMORY
    assert line.startswith("ferry check: model 'small.json' does not fit, so nothing was built: this host would hold "
                           "482 MiB (the reference's copies and the target's processes), over the 100 MiB it has "
                           "available (the test's host).")


def test_a_model_that_fits_is_built_as_named(small):
    from checkcfg import make_config

    cfg = make_config(small, "-w", "small.json")
    assert "overrides" not in cfg.workload.resolved["bind"]


def test_a_size_asked_for_shrinks_the_named_model_and_the_workers_build_that(small, monkeypatch):
    """The shrink `ferry check` asks for when the user gives --size with a model by name."""
    from checkcfg import make_config

    from torchferry.workloads.protocol import load_workload

    run = make_config(small, "-w", "small.json").workload
    monkeypatch.setattr(fit, "target_capacity", lambda name: fit.Capacity(32 * 2**20, True, "test"))  # named: too big
    with pytest.raises(DeviceOutOfMemoryError):
        fit.fit_named_model(run, "neuron")
    shrunk = fit.fit_named_model(run, "neuron", size="tiny")
    assert shrunk.resolved["bind"]["overrides"] == {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                                    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}
    model = load_workload(shrunk.spec, shrunk.workload_options(), shrunk.resolved).model
    assert (type(model).__name__, model.config.hidden_size, model.config.num_hidden_layers) == ("LlamaForCausalLM", 64, 2)
    # the flag reaches it: `ferry check -w small.json --size tiny` builds the shrunk model, its architecture kept
    assert make_config(small, "-w", "small.json", "--size", "tiny").workload.resolved == shrunk.resolved


@pytest.mark.parametrize("mode, what", [("forward", "its weights"), ("generate", "its weights"), ("train", "a training step")])
def test_inference_needs_the_weights_and_training_the_traced_step(small, mode, what):
    from torchferry.workloads.footprint.model import ModelSpec

    need = fit.estimate(ModelSpec(kind="config", name="small", source="small.json", config=SMALL), mode, 2, 32, 1, None)
    weights = need.weight_bytes
    assert need.what == what and weights == 15_803_392  # float32 parameters of SMALL
    assert need.device_bytes == (weights if mode != "train" else sum(need.breakdown.values()))
    # the reference: weights, the timed and determinism runs (X and G each), the float64 golden run (2X, 2G);
    # the target process: weights, its captured gradients and its device copy (the host's memory here)
    grads = weights if mode == "train" else 0
    assert need.host_bytes == (weights + 4 * need.device_bytes + 4 * grads) + (weights + grads + need.device_bytes)


def test_a_built_in_or_user_workload_sizes_itself_and_is_not_traced(small, monkeypatch):
    import torchferry.workloads.footprint.trace as trace
    from checkcfg import make_config

    monkeypatch.setattr(trace, "trace_step", lambda *a, **k: pytest.fail("a built-in workload was traced"))
    assert make_config(small, "-w", "llama").workload.resolved["module"] == "torchferry.workloads.llama"


def test_a_refusal_is_the_out_of_memory_kind():
    assert DeviceOutOfMemoryError.exit_status == ExitStatus.OUT_OF_MEMORY and DeviceOutOfMemoryError.slug == "out-of-memory"


def test_a_build_that_runs_out_of_memory_anyway_is_out_of_memory_not_the_workloads_error(tmp_path):
    """What the estimate cannot see (a model too big for this host at the margin, a user's build()) still ends as
    exit 6 with the fix, not as the workload's error with a traceback."""
    from torchferry.workloads.protocol import load_workload, resolve_source

    (tmp_path / "huge.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(2**24, 2**24), None\n")
    with pytest.raises(DeviceOutOfMemoryError) as err:
        load_workload("huge.py:build", {}, resolve_source("huge.py:build", tmp_path))
    assert str(err.value).startswith("workload 'huge.py:build': building its model ran out of this host's memory "
                                     "(RuntimeError: [enforce fail at alloc_cpu.cpp")
