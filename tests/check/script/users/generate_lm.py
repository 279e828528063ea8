"""Greedy generation from a small causal language model, as inference scripts write it: eval mode, no_grad, one call
of the model per new token, the tokens printed.

PLANTED (the check must catch it): with --plant, the attention takes a hand-written "fast path" on accelerators that
scales the scores by the model's width instead of the head's. The clean twin (no flag) takes one path everywhere.
"""
import argparse
import math

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--new-tokens", type=int, default=6)
parser.add_argument("--plant", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        width = d if (args.plant and x.device.type != "cpu") else d // self.heads
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(width)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.ln2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4, layers=2):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(64, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = TinyLM().to(device).eval()
ids = torch.tensor([[1, 7, 3, 9]], device=device)
with torch.no_grad():
    for _ in range(args.new_tokens):
        next_id = model(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
print("generated:", ids[0].tolist())
