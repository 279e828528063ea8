"""What TorchNeuron's `torch.compile` lowering refuses (the profile's `compiled_*` rules): each refusal
with TorchNeuron's message, its clean twin that still compiles and runs, and the rule switched off.
Sources: torch_neuronx/neuron_dynamo_backend/ (docs/device/compile.md, "What TorchNeuron's lowering
refuses"); the refusals raise before Inductor compiles anything, the twins compile."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # the twins compile through Inductor


def _compile(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron")(*args)


def _refused(fn, *args, match: str):
    from torch._dynamo.exc import BackendCompilerFailed

    with pytest.raises(BackendCompilerFailed) as info:
        _compile(fn, *args)
    message = str(info.value)
    for needle in (match, "Next step", "= false"):
        assert needle in message, (needle, message)


def _x(*shape, dtype=torch.float32):
    return torch.arange(1, 1 + torch.Size(shape).numel(), dtype=dtype).reshape(shape).to("neuron") / 7


# ------------------------------------------------------------------ higher-order operators
def _cond(x):
    return torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,))


def test_cond_is_refused_as_torch_mlir_refuses_it_and_where_twin_compiles(compile_env, rules):
    _refused(_cond, _x(4), match="Higher-order operation 'cond' not implemented in the FxImporter "
                                 "(tried '_import_hop_cond')")
    x = _x(4)
    twin = _compile(lambda x: torch.where(x.sum() > 0, x.sin(), x.cos()), x)
    assert torch.equal(twin.cpu(), x.cpu().sin())
    rules(compiled_higher_order_ops=False)
    assert torch.equal(_compile(_cond, x).cpu(), x.cpu().sin())


@torch.compiler.nested_compile_region
def _region(y):
    return y.sin() * 2


def test_a_nested_compile_region_is_refused_and_the_same_code_inlined_compiles(compile_env):
    _refused(lambda x: _region(x) + _region(x), _x(4), match="Higher-order operation 'invoke_subgraph'")
    x = _x(4)
    assert torch.allclose(_compile(lambda x: (x.sin() * 2) + (x.sin() * 2), x).cpu(), x.cpu().sin() * 4)


def test_while_loop_which_torch_mlir_imports_compiles(compile_env):
    from torch._higher_order_ops.while_loop import while_loop

    x = _x(4)
    _, out = _compile(lambda x: while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2),
                                           (torch.tensor(0, device=x.device), x)), x)
    assert torch.equal(out.cpu(), x.cpu() * 8)


@torch.library.custom_op("torchferry_test::add_one_", mutates_args={"y"})
def _add_one_(y: torch.Tensor) -> None:
    y.add_(1)


@torch.library.custom_op("torchferry_test::add_one", mutates_args=())
def _add_one(y: torch.Tensor) -> torch.Tensor:
    return y + 1


@_add_one.register_fake
def _(y):
    return torch.empty_like(y)


def test_a_custom_op_mutating_its_input_is_refused_and_its_functional_twin_compiles(compile_env):
    def mutating(x):
        y = x.clone()
        _add_one_(y)
        return y * 2

    _refused(mutating, _x(4), match="Higher-order operation 'auto_functionalized_v2'")
    x = _x(4)
    assert torch.equal(_compile(lambda x: _add_one(x) * 2, x).cpu(), (x.cpu() + 1) * 2)


# ------------------------------------------------------------------ no outputs
def _computes_but_returns_no_tensor(x):
    _ = x + 1
    return 3


def test_a_graph_with_no_output_is_refused_and_an_in_place_update_twin_compiles(compile_env, rules):
    _refused(_computes_but_returns_no_tensor, _x(4), match="No outputs found in the module, expected at least one "
                                                          "output, modify your code to have at least one output.")
    x = _x(4)
    expected = x.cpu() + 1
    def bump(x):
        x.add_(1)

    assert _compile(bump, x) is None
    assert torch.equal(x.cpu(), expected), "the in-place update is the graph's output there"
    rules(compiled_no_outputs=False)
    assert _compile(_computes_but_returns_no_tensor, x) == 3


# ------------------------------------------------------------------ symbolic sizes
def _nonzero_sum(x):
    return x.nonzero().sum()


def test_data_dependent_sizes_in_a_graph_are_refused_and_the_graph_break_twin_compiles(compile_env, rules,
                                                                                       monkeypatch):
    x = _x(5) - 0.5
    expected = x.cpu().nonzero().sum()
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
    _refused(_nonzero_sum, x, match="symbolic sizes or values (u0")
    rules(compiled_dynamic_shapes=False)
    assert _compile(_nonzero_sum, x).item() == expected
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", False)
    rules(compiled_dynamic_shapes=True)
    assert _compile(_nonzero_sum, x).item() == expected, "by default Dynamo breaks the graph at nonzero"


# ------------------------------------------------------------------ boolean index_put
def _set_masked(x, mask, values):
    x = x.clone()
    x[mask] = values
    return x


def test_a_boolean_index_put_of_several_values_is_refused_and_one_value_twins_compile(compile_env, rules):
    x = _x(6)
    mask = torch.tensor([True, False, True, False, True, False], device="neuron")
    values = torch.tensor([10.0, 20.0, 30.0], device="neuron")
    _refused(_set_masked, x, mask, values, match="Boolean index_put is not supported in torch.compile on Neuron")
    expected = x.cpu().masked_fill(mask.cpu(), 1.0)
    assert torch.equal(_compile(_set_masked, x, mask, torch.tensor(1.0, device="neuron")).cpu(), expected)
    assert torch.equal(_compile(lambda x, m: torch.where(m, 1.0, x), x, mask).cpu(), expected)
    rules(compiled_boolean_index_put=False)
    assert torch.equal(_compile(_set_masked, x, mask, values).cpu()[mask.cpu()], values.cpu())


# ------------------------------------------------------------------ float64
def test_float64_computes_in_float32_in_every_op_of_a_compiled_graph(compile_env, rules):
    from torchferry.device import target

    assert target.runs_on_host("aten::log1p.default") or target.runs_on_host("aten::log1p"), \
        "log1p is a host fallback in eager mode: 64-bit exact there, so this test tells the rules apart"
    x = (torch.arange(1, 9, dtype=torch.float64) / 3).to("neuron")
    narrowed = torch.log1p(x.cpu().float().double()).float().double()
    assert not torch.equal(narrowed, torch.log1p(x.cpu())), "the case must tell float32 from float64"
    assert torch.equal(_compile(torch.log1p, x).cpu(), narrowed)
    rules(compiled_float64=False)
    assert torch.equal(_compile(torch.log1p, x).cpu(), torch.log1p(x.cpu())), "the eager device's answer"


def test_a_float32_graph_keeps_the_cpus_bits(compile_env):
    x = _x(8)
    assert torch.equal(_compile(torch.log1p, x).cpu(), torch.log1p(x.cpu()))


# ------------------------------------------------------------------ aot_compile
def test_aot_compile_is_refused_as_on_torchneuron_without_a_rule(compile_env):
    """PyTorch refuses a backend whose compiled function is not a SerializableCallable; TorchNeuron's
    is a plain function (its CI lists 12 test_aot_compile tests failing so), and so is ours."""
    x = _x(4)
    with pytest.raises(RuntimeError, match="does not implement SerializableCallable"):
        torch.compile(lambda x: x.sin() + 1, backend="neuron", fullgraph=True).aot_compile(((x,), {}))
    assert torch.equal(_compile(lambda x: x.sin() + 1, x).cpu(), x.cpu().sin() + 1)
