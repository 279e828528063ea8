"""`torch.compile(backend="neuron")`: TorchNeuron's contract on the built-in device.

Models are tiny so that Inductor's C++ compilation dominates; each test resets Dynamo so
that compilations are counted from zero.
"""

from __future__ import annotations

import json
import warnings

import pytest

import torchferry.device

pytestmark = pytest.mark.slow  # torch.compile through Inductor on the built-in device


def _tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager",  # sdpa: see docs/device/compile.md, known limits
    )
    return LlamaForCausalLM(config).eval()


def _forward_graphs(metrics: dict) -> list[dict]:
    return [g for g in metrics["graphs"] if g["kind"] in ("forward", "inference")]


def test_enable_registers_the_backend(neuron):
    import torch

    torchferry.device.enable()  # idempotent
    assert "neuron" in torch._dynamo.list_backends()


@pytest.mark.slow
def test_compiled_llama_forward_and_backward_match_eager(compile_env):
    import torch

    model = _tiny_llama().to("neuron")
    ids = torch.randint(0, 96, (2, 12)).to("neuron")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    eager_loss = loss.detach().cpu()
    eager_grads = {n: p.grad.cpu().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    compiled = torch.compile(model, backend="neuron")
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()

    assert loss.device.type == "neuron"
    torch.testing.assert_close(loss.detach().cpu(), eager_loss, rtol=1e-5, atol=1e-5)
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.device.type == "neuron", name
        torch.testing.assert_close(param.grad.cpu(), eager_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    kinds = {g["kind"] for g in compile_env.get_dynamo_metrics()["graphs"]}
    assert {"forward", "backward"} <= kinds


def test_compiled_results_are_device_memory_not_copies(compile_env):
    import torch

    def f(t, scale):
        t.mul_(2)  # an input mutation lands in the device tensor
        return t + 1, t[1:], scale * 3

    compiled = torch.compile(f, backend="neuron")
    for _ in range(2):  # the first call sorts the results, the second follows its plan
        x = torch.arange(64.0, device="neuron").reshape(8, 8)
        plus_one, view, scaled = compiled(x, torch.tensor(0.5))
        expected = torch.arange(64.0).reshape(8, 8) * 2
        torch.testing.assert_close(x.cpu(), expected)
        assert plus_one.device.type == "neuron"
        torch.testing.assert_close(plus_one.cpu(), expected + 1)
        # A fresh result is device memory even when computed from a CPU scalar only:
        # TorchNeuron allocates every output of a compiled graph on the device (executor.py).
        assert scaled.device.type == "neuron" and scaled.item() == 1.5
        x.add_(1)  # a view of an input stays a view of the device input
        torch.testing.assert_close(view.cpu(), x.cpu()[1:])


def test_a_compiled_graphs_buffers_come_from_the_device_cache(compile_env):
    import torch

    compiled = torch.compile(lambda t: t * 2 + 1, backend="neuron")
    x = torch.ones(512, 512, device="neuron")  # 1 MiB
    compiled(x)
    compile_env.empty_cache()
    y = compiled(x)
    address = y.data_ptr()
    del y
    # Inductor's own buffer, adopted as the result, goes back to the cache, not to the host.
    assert compile_env.memory_reserved() - compile_env.memory_allocated() == 2**20
    z = compiled(x)
    assert z.data_ptr() == address and torch.equal(z.cpu(), torch.full((512, 512), 3.0))


def test_a_compiled_graph_is_aotautograds_own_device_node(compile_env):
    # Nothing wraps AOTAutograd's compiled function: its autograd.Function is the graph's
    # node, on device tensors, so a retained graph runs its backward twice as on the CPU.
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).to("neuron")
    x = torch.randn(2, 4).to("neuron").requires_grad_()
    eager_x = x.detach().clone().requires_grad_()
    out = torch.compile(model, backend="neuron")(x)
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    out.sum().backward(retain_graph=True)
    out.sum().backward()
    model(eager_x).sum().backward()
    assert x.grad.device.type == "neuron"
    torch.testing.assert_close(x.grad.cpu(), 2 * eager_x.grad.cpu())


@pytest.mark.slow
def test_three_sequence_lengths_compile_three_forward_graphs(compile_env):
    import torch

    model = _tiny_llama().to("neuron")
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        for length in (8, 12, 16, 8, 12):
            compiled(input_ids=torch.randint(0, 96, (1, length)).to("neuron"))
    graphs = _forward_graphs(compile_env.get_dynamo_metrics())
    assert len(graphs) == 3, graphs
    assert len({g["input_signature"] for g in graphs}) == 3
    assert all(g["graph_node_count"] > 0 and g["torch_neuronx_compile_us"] > 0 for g in graphs)


def test_recompiles_are_counted_per_new_shape_of_a_frame(compile_env):
    import torch

    f = torch.compile(torch.nn.Linear(4, 3).to("neuron"), backend="neuron")
    with torch.no_grad():
        for rows in (2, 3, 5, 3, 2):  # three shapes: one compilation and two recompilations
            f(torch.randn(rows, 4, device="neuron"))
    metrics = compile_env.get_dynamo_metrics()
    assert metrics["recompiles"] == 2
    assert sorted(g["compile_id"] for g in metrics["graphs"]) == ["0/0", "0/1", "0/2"]
    compile_env.reset_dynamo_metrics()
    assert compile_env.get_dynamo_metrics()["recompiles"] == 0


def test_a_backward_graph_carries_its_forwards_compile_id(compile_env):
    import torch

    model = torch.nn.Linear(4, 3).to("neuron")
    torch.compile(model, backend="neuron")(torch.randn(2, 4, device="neuron")).sum().backward()
    graphs = compile_env.get_dynamo_metrics()["graphs"]
    assert sorted(g["kind"] for g in graphs) == ["backward", "forward"]
    assert len({g["compile_id"] for g in graphs}) == 1


def test_compiled_results_are_not_counted_as_ops(compile_env):
    # Adopting a compiled graph's outputs as device memory is not an op (on TorchNeuron the
    # outputs are device tensors already), so it is neither executed nor a predicted fallback.
    import torch

    x = torch.randn(4, 4, device="neuron")
    f = torch.compile(lambda t: t * 2 + 1, backend="neuron")
    f(x)
    compile_env.clear_op_tracking()
    f(x)
    ops = set(compile_env.get_executed_ops()) | set(compile_env.get_fallback_ops())
    assert not any(op.startswith("torchferry::") for op in ops), ops


def test_a_graph_mixing_devices_fails_as_on_every_accelerator(compile_env):
    import torch

    f = torch.compile(lambda a, b: a + b, backend="neuron")
    with pytest.raises(Exception, match="(?i)device"):
        f(torch.ones(3, device="neuron"), torch.ones(3))
    scalar = torch.tensor(2.0)  # a 0-dim CPU tensor is a scalar, as in eager
    torch.testing.assert_close(f(torch.ones(3, device="neuron"), scalar).cpu(), torch.full((3,), 3.0))


def test_dynamic_true_is_rejected_with_the_rule_and_the_fix(compile_env):
    import torch

    f = torch.compile(lambda t: t.sin(), backend="neuron", dynamic=True)
    with pytest.raises(Exception, match=r"static shapes only.*pad or bucket") as info:
        f(torch.randn(4, 5, device="neuron"))
    assert "dynamic=True" in str(info.value)


def test_fullgraph_with_a_graph_break_raises(compile_env):
    import torch

    def breaks(t):
        t = t + 1
        torch._dynamo.graph_break()
        return t * 2

    with pytest.raises(Exception, match="graph_break|graph break"):
        torch.compile(breaks, backend="neuron", fullgraph=True)(torch.randn(3, device="neuron"))


def test_graph_break_compiles_each_subgraph_and_reports_the_reason(compile_env):
    import torch

    def breaks(t):
        t = t + 1
        print("side effect")  # a graph break
        return t * 2

    x = torch.randn(3, device="neuron")
    out = torch.compile(breaks, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), (x.cpu() + 1) * 2)
    metrics = compile_env.get_dynamo_metrics()
    assert len(_forward_graphs(metrics)) == 2
    assert metrics["graph_breaks"] and all(b["reason"] and b["count"] >= 1 for b in metrics["graph_breaks"])


def test_other_modes_warn_once_and_are_ignored(compile_env):
    import torch

    x = torch.randn(4, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = torch.compile(lambda t: t.cos(), backend="neuron", mode="max-autotune-no-cudagraphs")
        f(x)
        f(torch.randn(5, device="neuron"))  # a second graph, no second warning
    about_mode = [w for w in caught if "max-autotune-no-cudagraphs" in str(w.message)]
    assert len(about_mode) == 1
    torch.testing.assert_close(f(x).cpu(), x.cpu().cos())


def test_cache_disabled_records_disabled(compile_env, monkeypatch):
    import torch

    monkeypatch.setenv("TORCHFERRY_DISABLE_COMPILE_CACHE", "1")
    torch.compile(lambda t: t.exp(), backend="neuron")(torch.randn(3, device="neuron"))
    assert [g["cache"] for g in compile_env.get_dynamo_metrics()["graphs"]] == ["disabled"]


_SECOND_PROCESS = """
import json, torch, torchferry.device
torchferry.device.enable()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("neuron")
compiled = torch.compile(model, backend="neuron")
compiled(torch.randn(8, 16, device="neuron")).sum().backward()
print(json.dumps(torch.neuron.get_dynamo_metrics()))
"""


@pytest.mark.slow
def test_a_second_process_hits_the_cache(neuron, run_python, tmp_path):
    env = {"TORCHFERRY_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        done = run_python(_SECOND_PROCESS, env=env, timeout=280)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = ([g["cache"] for g in r["graphs"]] for r in runs)
    assert first == ["miss", "miss"], first  # forward and backward compiled
    assert second and set(second) == {"hit"}, second


def test_an_op_torchneuron_lacks_still_counts_as_a_fallback_in_every_compiled_call(compile_env):
    # sort.stable is a predicted host fallback in eager mode; inside a compiled graph it is
    # counted on each call of the graph, as the eager device counts it (compile/fallbacks.py).
    import torch

    x = torch.randn(4, 8, device="neuron")
    f = torch.compile(lambda t: torch.sort(t * 2, dim=-1, stable=True).values + 1, backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x)
    compile_env.clear_op_tracking()
    out = f(x)
    f(x)
    assert compile_env.get_fallback_ops() == {"aten::sort.stable": 2}
    assert torch.equal(out.cpu(), torch.sort(x.cpu() * 2, dim=-1, stable=True).values + 1)


def test_a_compiled_graph_of_native_ops_and_dropout_counts_no_fallback(compile_env):
    # The twin: native ops, views and Inductor's own random prims for dropout are no fallback.
    import torch

    x = torch.randn(4, 8, device="neuron")
    f = torch.compile(lambda t: torch.nn.functional.dropout(t.t() * 2, 0.1, training=True).sum(), backend="neuron")
    f(x)
    compile_env.clear_op_tracking()
    f(x)
    assert compile_env.get_fallback_ops() == {}
