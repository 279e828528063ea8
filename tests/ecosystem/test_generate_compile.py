"""`generate` with a static KV cache under `torch.compile(backend="neuron")`: TorchNeuron
compiles per input shape, so a fixed `StaticCache` keeps the decode step to one graph and
each prompt length adds one prefill graph; greedy tokens equal the CPU's eager ones."""

from __future__ import annotations

import copy

import torch
from hf_tiny import tiny_llama
import pytest

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device

MAX_CACHE = 32
NEW_TOKENS = 6


def test_static_cache_generate_compiles_one_graph_per_prompt_length_plus_one_decode(neuron):
    from transformers import StaticCache

    model = tiny_llama().eval()
    reference = copy.deepcopy(model)
    model = model.to("neuron")
    model.forward = torch.compile(model.forward, backend="neuron", fullgraph=True)
    torch.compiler.reset()
    neuron.reset_dynamo_metrics()
    generator = torch.Generator().manual_seed(2)
    lengths = [5, 7, 5]
    for length in lengths:
        prompt = torch.randint(3, 128, (1, length), generator=generator)
        cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE)
        out = model.generate(prompt.to("neuron"), past_key_values=cache, max_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=0)
        expected = reference.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
        assert out.device.type == "neuron"
        assert torch.equal(out.cpu(), expected), f"prompt length {length}: tokens differ from the CPU"
    metrics = neuron.get_dynamo_metrics()
    assert metrics["graph_breaks"] == []
    # Two prefill graphs (lengths 5 and 7; the second 5 reuses its graph) and one decode graph.
    assert len(metrics["graphs"]) == len(set(lengths)) + 1, [g["input_signature"] for g in metrics["graphs"]]
