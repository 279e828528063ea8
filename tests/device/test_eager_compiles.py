"""Eager NEFF-compile accounting: each distinct op signature TorchNeuron would compile
counts once on a cold cache; signatures persist in TORCH_NEURONX_NEFF_CACHE_DIR."""

from __future__ import annotations

import json

import pytest
import torch

import torchferry.device
from torchferry.device import _settings

pytestmark = pytest.mark.timeout(180)


def step(model: torch.nn.Module, length: int) -> None:
    x = torch.ones(2, length, 8, device="neuron")
    loss = model(x).square().mean()
    loss.backward()


def test_an_eager_loop_over_5_lengths_compiles_in_each_of_the_first_5_steps_then_never(neuron):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).to("neuron")
    lengths = [3, 5, 7, 9, 11]
    new = []
    for length in lengths * 2:
        mark = torchferry.device.eager_compiles()
        step(model, length)
        new.append(torchferry.device.eager_compiles().since(mark).signatures)
    assert all(n > 0 for n in new[:5]), new
    assert new[5:] == [0] * 5, new


def test_counts_split_compilations_from_calls(neuron):
    x = torch.ones(3, 17, device="neuron")  # a shape no other test uses
    mark = torchferry.device.eager_compiles()
    for _ in range(4):
        x = x * 2
    delta = torchferry.device.eager_compiles().since(mark)
    assert delta.signatures == 1 and delta.calls == 4
    assert delta.compilations + delta.cache_hits == 1


def test_forgetting_seen_signatures_counts_them_again_as_cache_hits(neuron):
    """A warm coverage worker's next case counts as a fresh process would: the same ops count again,
    now found in the cache; without the call they do not count at all."""
    x = torch.ones(3, 19, device="neuron")  # a shape no other test uses

    def run() -> torchferry.device.EagerCompiles:
        mark = torchferry.device.eager_compiles()
        (x * 2 + 1).sum()
        return torchferry.device.eager_compiles().since(mark)

    first = run()
    again = run()
    torchferry.device.forget_eager_signatures()
    forgotten = run()
    assert first.signatures == 3 and again.signatures == 0, (first, again)
    assert forgotten.signatures == 3 and forgotten.cache_hits == 3 and forgotten.compilations == 0, forgotten


_PROCESS = """
    import json, torch, torchferry.device as d
    d.enable()
    x = torch.ones(4, 5, device="neuron")
    (x * 3 + 1).sum().item()
    print(json.dumps(vars(d.eager_compiles())))
"""


def test_a_second_process_finds_a_warm_cache(run_python, tmp_path):
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff")}
    first = run_python(_PROCESS, env=env)
    assert first.returncode == 0, first.stderr
    cold = json.loads(first.stdout.splitlines()[-1])
    assert cold["signatures"] > 0 and cold["compilations"] == cold["signatures"] and cold["cache_hits"] == 0
    second = run_python(_PROCESS, env=env)
    warm = json.loads(second.stdout.splitlines()[-1])
    assert warm["signatures"] == cold["signatures"] and warm["compilations"] == 0
    assert warm["cache_hits"] == cold["signatures"]


def test_an_unwritable_cache_folder_keeps_counting_in_memory_with_one_warning(run_python, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_python(_PROCESS, env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(blocker / "neff")})
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout.splitlines()[-1])
    assert counts["compilations"] > 0
    assert result.stderr.count("eager-compile cache") == 1, result.stderr


def test_the_default_folder_is_torchferrys_never_the_real_default(tmp_path):
    folder = _settings.neff_cache_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert folder == tmp_path / "torchferry" / "neff_cache"
    assert _settings.neff_cache_dir({}) != "/tmp/neff_cache"
    assert _settings.neff_cache_dir({"TORCH_NEURONX_NEFF_CACHE_DIR": "/x/y"}).as_posix() == "/x/y"
