"""Tiny Llama causal LM from a transformers config with random weights (no download)."""

from __future__ import annotations

from torchferry.workloads.tokens import SIZES, token_batch


def build(size: str = "tiny", batch_size: int = 2, seq_len: int = 32, mode: str = "training") -> dict:
    """Return the workload protocol dict: model, batch(device, seed); the model computes its own loss."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv_heads, inter, vocab = SIZES[size]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max(128, 2 * seq_len + 64),
        attention_dropout=0.0,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    return {
        "model": model,
        "batch": lambda device, seed: token_batch(vocab, batch_size, seq_len, device, seed, labels=mode == "training"),
    }
