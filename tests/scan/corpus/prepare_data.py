"""Tokenize a corpus once, drop padding and rare tokens, and cache packed tensors for training."""

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer


def load_lines(path):
    return [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]


def encode(tokenizer, lines, max_length):
    enc = tokenizer(lines, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"].bool()


def vocabulary_stats(ids, pad_id):
    real = ids[ids != pad_id]
    tokens, counts = torch.unique(real, return_counts=True)
    order = counts.argsort(descending=True)
    print("most frequent token ids:", tokens[order[:10]].tolist())
    return tokens, counts


def pack(ids, mask, block):
    flat = ids[mask]
    doc_lengths = mask.sum(1)
    doc_ids = torch.repeat_interleave(torch.arange(len(ids)), doc_lengths)
    usable = flat.numel() // block * block
    print(f"packed {usable} of {flat.numel()} tokens into blocks of {block}")
    return flat[:usable].view(-1, block), doc_ids[:usable].view(-1, block)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--out", default="packed.pt")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    tokenizer.pad_token = tokenizer.eos_token
    ids, mask = encode(tokenizer, load_lines(args.corpus), max_length=2048)
    tokens, counts = vocabulary_stats(ids, tokenizer.pad_token_id)
    rare = tokens[counts < args.min_count]
    ids[torch.isin(ids, rare)] = tokenizer.unk_token_id or tokenizer.eos_token_id
    blocks, docs = pack(ids, mask, args.block)
    hist = torch.bincount(docs.flatten())
    print(f"{len(blocks)} blocks; documents per block: {hist.nonzero().numel()}")
    torch.save({"blocks": blocks, "docs": docs, "vocab": tokens}, args.out)
    if torch.cuda.is_available():
        print("a GPU is available; training can start")


if __name__ == "__main__":
    main()
