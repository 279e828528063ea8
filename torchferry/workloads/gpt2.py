"""Tiny GPT-2 causal LM from a transformers config with random weights (no download)."""

from __future__ import annotations

from torchferry.workloads.tokens import SIZES, token_batch


def build(size: str = "tiny", batch_size: int = 2, seq_len: int = 32, mode: str = "training") -> dict:
    """Return the workload protocol dict; dropouts are zero so that runs are deterministic."""
    from transformers import GPT2Config, GPT2LMHeadModel

    hidden, layers, heads, _, inter, vocab = SIZES[size]
    config = GPT2Config(
        vocab_size=vocab,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_inner=inter,
        n_positions=max(128, 2 * seq_len + 64),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        pad_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    return {
        "model": model,
        "batch": lambda device, seed: token_batch(vocab, batch_size, seq_len, device, seed, labels=mode == "training"),
    }
