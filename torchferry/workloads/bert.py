"""Tiny BERT masked LM from a transformers config with random weights (no download).

BERT is an encoder: it supports inference and training, not generation.
"""

from __future__ import annotations

from torchferry.workloads.tokens import SIZES, token_batch


def build(size: str = "tiny", batch_size: int = 2, seq_len: int = 32, mode: str = "training") -> dict:
    """Return the workload protocol dict; labels are the input ids (a denoising-free MLM loss)."""
    from transformers import BertConfig, BertForMaskedLM

    hidden, layers, heads, _, inter, vocab = SIZES[size]
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=max(128, seq_len),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForMaskedLM(config)
    return {
        "model": model,
        "batch": lambda device, seed: token_batch(vocab, batch_size, seq_len, device, seed, labels=mode == "training"),
        "generates": False,
    }
