"""Tiny Hugging Face models, tokenizer and data built in code (random weights, no hub)."""

from __future__ import annotations

import torch

VOCAB_WORDS = "the a cat dog sat on mat ran far and then slept".split()


def tiny_llama(vocab_size: int = 128):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=1)
    return LlamaForCausalLM(config)


def tiny_tokenizer():
    """A word-level tokenizer built in code: `<pad>`=0, `<eos>`=1, `<unk>`=2, then VOCAB_WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    vocab.update({word: i + 3 for i, word in enumerate(VOCAB_WORDS)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def token_batches(count: int, length: int = 16, vocab_size: int = 128) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    rows = [torch.randint(0, vocab_size, (length,), generator=generator) for _ in range(count)]
    return [{"input_ids": row, "labels": row} for row in rows]
