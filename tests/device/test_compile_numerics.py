"""Target numerics hold inside `torch.compile(backend="neuron")` graphs: a compiled graph
computes 64-bit values as the eager device does (int64 wraps as int32, float64 rounds to
float32, forward and backward), and host numerics leave them exact."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # torch.compile through Inductor on the built-in device
# `compile_env` (conftest) gives each test a fresh Dynamo and its own cache: numerics is a
# start-up setting, and Dynamo does not guard on it.


def hashed(ids: torch.Tensor) -> torch.Tensor:
    return (ids * 1_000_000_007 + 12_345) % 2**40


def scaled_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * (1 / 3)).sum()


@pytest.mark.parametrize("mode", ["target", "host"])
def test_compiled_int64_matches_the_eager_device(neuron, numerics, compile_env, mode):
    numerics(mode)
    ids = torch.arange(1, 9, dtype=torch.int64, device="neuron")
    compiled = torch.compile(hashed, backend="neuron")(ids)
    assert compiled.dtype == torch.int64
    assert torch.equal(compiled.cpu(), hashed(ids).cpu())
    exact = torch.equal(compiled.cpu(), hashed(ids.cpu()))
    assert exact is (mode == "host")  # the values leave the 32-bit range: only host numerics keep them


@pytest.mark.parametrize("mode", ["target", "host"])
def test_compiled_float64_backward_matches_the_eager_device(neuron, numerics, compile_env, mode):
    numerics(mode)
    x = torch.linspace(0.1, 1, 7, dtype=torch.float64, device="neuron", requires_grad=True)
    eager_x = x.detach().clone().requires_grad_()
    torch.compile(scaled_sum, backend="neuron")(x).backward()
    scaled_sum(eager_x).backward()
    assert x.grad.dtype == torch.float64
    assert torch.equal(x.grad.cpu(), eager_x.grad.cpu())
    third = torch.tensor(1 / 3, dtype=torch.float64)
    assert torch.equal(x.grad.cpu()[0], third) is (mode == "host")


def test_the_compile_cache_keeps_each_numerics_apart(run_python, tmp_path):
    """A graph compiled under target numerics must not answer a later host-numerics process,
    whichever cache keys the graph before the numerics pass (AOTAutograd's does)."""
    code = """
        import torch, torchferry.device as d
        d.enable()
        ids = torch.arange(1, 9, dtype=torch.int64, device="neuron")
        out = torch.compile(lambda t: t * 1_000_000_007 + 12_345, backend="neuron")(ids)
        print(torch.equal(out.cpu(), ids.cpu() * 1_000_000_007 + 12_345))
    """
    env = {"TORCHFERRY_CACHE_DIR": str(tmp_path), "TORCHFERRY_FALLBACK": "silent"}
    first = run_python(code, {**env, "TORCHFERRY_NUMERICS": "target"}, timeout=200)
    second = run_python(code, {**env, "TORCHFERRY_NUMERICS": "host"}, timeout=200)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr[-2000:] + second.stderr[-2000:]
    assert (first.stdout.split()[-1], second.stdout.split()[-1]) == ("False", "True")
