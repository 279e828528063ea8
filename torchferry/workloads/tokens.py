"""Token batches and model sizes shared by the transformers workloads (llama, gpt2, bert)."""

from __future__ import annotations

import torch


def token_batch(vocab_size: int, batch_size: int, seq_len: int, device, seed: int, labels: bool) -> dict:
    """Random token ids drawn on the CPU with a seeded generator, then moved: every device sees the same batch."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=gen)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if labels:
        batch["labels"] = ids.clone()
    return {k: v.to(device) for k, v in batch.items()}


SIZES = {
    # name: (hidden, layers, heads, kv_heads, intermediate, vocab)
    "tiny": (64, 2, 4, 2, 128, 256),
    "small": (256, 4, 8, 4, 688, 2048),
    "base": (768, 12, 12, 12, 3072, 32000),
}
