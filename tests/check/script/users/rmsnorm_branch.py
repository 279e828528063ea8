"""A tiny transformer language model trained in a plain loop, as users write one.

PLANTED (the check must catch it): on an accelerator, RMSNorm takes a hand-written path that forgets the epsilon and
the learned scale. Pass --no-plant for the clean twin, which takes the same path on every device.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--no-plant", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if x.device.type != "cpu" and not args.no_plant:  # "faster" path for accelerators
            # (as x / x.pow(2).mean(-1, keepdim=True).sqrt() it would not run on trn2 at all: its backward divides a
            # gradient in attention's transposed layout, a div.Tensor TorchNeuron's div.out refuses)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = TinyLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.randint(0, 64, (64, 17))
for step in range(args.steps):
    batch = data[step * 8:(step + 1) * 8].to(device)
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
