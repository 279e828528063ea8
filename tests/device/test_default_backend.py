"""`torch.compile(model)` with no backend: `neuron` for device graphs, Inductor for the rest.

TorchNeuron's reference says the `neuron` backend is "auto-selected when running on a Neuron
device"; torchferry/device/compile/selection.py does it through torch 2.13's default-backend
hook. These tests fail if PyTorch changes that hook underneath.
"""

from __future__ import annotations

import inspect

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # torch.compile through Inductor on the built-in device


def _mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _train(model, compiled, batches):
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_the_hook_this_relies_on_is_still_there(compile_env):
    # torch.compile's backend defaults to None and asks Dynamo's registry for the default;
    # select() builds Inductor with torch's own wrapper. If any of this moves, this fails.
    import torch
    from torch._dynamo.backends import registry

    from torchferry.device.compile import selection

    assert inspect.signature(torch.compile).parameters["backend"].default is None
    assert registry.get_default_backend() is selection.select
    assert "mode" in inspect.signature(torch._TorchCompileInductorWrapper).parameters
    from torch._inductor.codegen.common import get_scheduling_for_device

    assert get_scheduling_for_device("neuron") is selection.RefuseInductor


def test_compile_without_a_backend_trains_a_device_model_like_eager(compile_env):
    import torch

    torch.manual_seed(1)
    batches = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(3)]
    device_batches = [(x.to("neuron"), y.to("neuron")) for x, y in batches]
    eager_model = _mlp().to("neuron")
    eager_losses, eager_params = _train(eager_model, eager_model, device_batches)

    model = _mlp().to("neuron")
    compiled_losses, compiled_params = _train(model, torch.compile(model), device_batches)

    for got, expected in zip(compiled_losses + compiled_params, eager_losses + eager_params):
        torch.testing.assert_close(got, expected)
    graphs = compile_env.get_dynamo_metrics()["graphs"]
    kinds = sorted(g["kind"] for g in graphs)
    assert kinds == ["backward", "forward"], graphs  # one graph pair, compiled once, run 3 times
    assert all(g["graph_name"].startswith("neuron_graph_") for g in graphs)


def test_cpu_models_still_compile_with_inductor_in_the_same_process(compile_env):
    import torch
    from torch._dynamo.utils import counters

    model = _mlp()
    x = torch.randn(4, 8)
    before = sum(counters["inductor"].values())
    got = torch.compile(model)(x)
    torch.testing.assert_close(got, model(x))
    assert sum(counters["inductor"].values()) > before  # Inductor compiled it
    assert compile_env.get_dynamo_metrics()["graphs"] == []  # not the neuron backend


def test_default_compile_keeps_the_neuron_contract_for_modes(compile_env):
    import torch

    model = _mlp().to("neuron")
    with pytest.warns(UserWarning, match="mode='max-autotune'.*TorchNeuron supports mode='default' only"):
        torch.compile(model, mode="max-autotune")(torch.randn(2, 8).to("neuron"))
    assert [g["kind"] for g in compile_env.get_dynamo_metrics()["graphs"]] == ["forward"]


def test_explicit_inductor_on_the_device_names_the_neuron_backend(compile_env):
    import torch

    from torchferry.device.compile.selection import InductorOnDeviceError

    model = _mlp().to("neuron")
    with pytest.raises(Exception) as caught:
        torch.compile(model, backend="inductor")(torch.randn(2, 8).to("neuron"))
    chain, error = [], caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, InductorOnDeviceError) for e in chain), [type(e).__name__ for e in chain]
    assert not any(isinstance(e, KeyError) for e in chain)
    assert "backend='neuron'" in str(caught.value)


def test_enabling_imports_no_dynamo_and_respects_a_default_of_the_users_own(run_python):
    result = run_python(
        """
        import sys, warnings; warnings.simplefilter("ignore")
        import torch, torchferry.device
        torchferry.device.enable()
        assert "torch._dynamo" not in sys.modules, "enable() imported Dynamo"
        model = torch.nn.Linear(3, 2).to("neuron")
        torch.compile(model)(torch.ones(1, 3).to("neuron"))
        print("graphs", len(torch.neuron.get_dynamo_metrics()["graphs"]))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "graphs 1" in result.stdout
    result = run_python(
        """
        import torch
        from torch._dynamo.backends import registry
        registry.set_default_backend("eager")
        import torchferry.device
        torchferry.device.enable()
        print("default", registry.get_default_backend())
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "default eager" in result.stdout
