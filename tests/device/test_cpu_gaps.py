"""Kernels the CPU lacks but accelerators provide: the `neuron` device computes them.

Libraries take accelerator code paths on any device that is not the CPU. Each case
found (torchferry/device/csrc/CpuGaps.cpp; the sweep in bench/causal_lm_sweep.py)
has a test here that proves the device gives the result the accelerator would.
"""

from __future__ import annotations

import pytest
import torch

import torchferry.device

pytestmark = pytest.mark.slow  # torch.compile through Inductor on the built-in device


@pytest.fixture(scope="module", autouse=True)
def neuron() -> None:
    torchferry.device.enable()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_integer_histc_counts_like_float_histc_and_keeps_the_dtype(dtype: torch.dtype) -> None:
    values = torch.tensor([0, 1, 1, 3, 3, 3, 7, 9, 12], dtype=dtype)  # 12 is outside [0, 9]
    expected = torch.histc(values.double(), bins=5, min=0, max=9).to(dtype)
    with pytest.raises(RuntimeError, match="histogram_cpu"):
        torch.histc(values, bins=5, min=0, max=9)  # the gap: the CPU refuses integers

    got = torch.histc(values.to("neuron"), bins=5, min=0, max=9)

    assert got.device.type == "neuron"
    assert got.dtype == dtype
    assert torch.equal(got.cpu(), expected)


def test_integer_histc_out_writes_the_given_tensor() -> None:
    values = torch.tensor([2, 2, 0, 1], dtype=torch.int32, device="neuron")
    out = torch.empty(0, dtype=torch.int32, device="neuron")

    result = torch.histc(values, bins=3, min=0, max=2, out=out)

    assert result is out
    assert torch.equal(out.cpu(), torch.tensor([1, 1, 2], dtype=torch.int32))


def test_integer_histc_compiles_for_the_device_as_it_runs_eagerly() -> None:
    """Under torch.compile(backend="neuron") the graph is lowered as a CPU graph, whose histc
    refuses integers at trace time; the backend takes the eager kernel's float64 route instead."""
    def count(x):
        return torch.histc(x, bins=5, min=0, max=9) * 2

    values = torch.tensor([0, 1, 1, 3, 3, 3, 7, 9, 12], dtype=torch.int32, device="neuron")
    torch._dynamo.reset()
    got = torch.compile(count, backend="neuron", fullgraph=True)(values)

    assert got.device == values.device and got.dtype == torch.int32
    assert torch.equal(got.cpu(), count(values).cpu())


def test_float_histc_is_the_cpu_kernel_bitwise() -> None:
    values = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    expected = torch.histc(values, bins=17, min=-2, max=2)

    got = torch.histc(values.to("neuron"), bins=17, min=-2, max=2)

    assert torch.equal(got.cpu(), expected)


def _tiny_moe(model_type: str, experts_implementation: str | None = None):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        model_type, vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    if experts_implementation is not None:
        model.set_experts_implementation(experts_implementation)
    return model


@pytest.mark.parametrize(
    ("model_type", "experts_implementation"),
    [("mixtral", None), ("mixtral", "grouped_mm"), ("qwen2_moe", None)],
)
def test_moe_forward_on_neuron_matches_cpu(model_type: str, experts_implementation: str | None) -> None:
    """MoE routing counts tokens per expert with integer histc off the CPU."""
    model = _tiny_moe(model_type, experts_implementation)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(input_ids=ids).logits

    model.to("neuron")
    torch.neuron.clear_op_tracking()
    with torch.no_grad():
        got = model(input_ids=ids.to("neuron")).logits

    assert "aten::histc.out" in torch.neuron.get_executed_ops()  # the accelerator path ran
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.Conv1d(4, 6, 3, padding=2, groups=2),  # the causal conv of state-space models
        lambda: torch.nn.Conv2d(3, 4, 3, stride=2, padding=1),
        lambda: torch.nn.ConvTranspose2d(3, 4, 3, stride=2),
    ],
    ids=["conv1d-groups", "conv2d", "conv-transpose2d"],
)
def test_convolution_forward_and_backward_match_cpu(make) -> None:
    """PyTorch sends every PrivateUse1 convolution to `convolution_overrideable`,
    which has no kernel of its own; the device runs the CPU's convolution."""
    torch.manual_seed(0)
    cpu_module = make()
    x = torch.randn(2, cpu_module.in_channels, *([7] * (cpu_module.weight.dim() - 2)), requires_grad=True)
    cpu_module(x).square().sum().backward()
    module = make()
    module.load_state_dict(cpu_module.state_dict())
    module.to("neuron")
    xn = x.detach().to("neuron").requires_grad_()

    out = module(xn)
    out.square().sum().backward()

    assert out.device.type == "neuron"
    assert torch.equal(out.detach().cpu(), cpu_module(x).detach())
    assert torch.equal(xn.grad.cpu(), x.grad)
    assert torch.equal(module.weight.grad.cpu(), cpu_module.weight.grad)
    assert torch.equal(module.bias.grad.cpu(), cpu_module.bias.grad)


def test_histc_with_a_wrong_shaped_out_warns_that_it_resized_it_as_the_cpu_does() -> None:
    values = torch.rand(10)
    for device in ("cpu", "neuron"):
        out = torch.empty(3, device=device)
        with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
            torch.histc(values.to(device), bins=5, out=out)
        assert out.shape == (5,)
