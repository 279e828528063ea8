"""The run a profile-guided build of the device's C++ core learns its hot paths from.

`setup.py` builds `torchferry.device._C` instrumented, runs this once (a few seconds), and
builds it again with the profile, so that the per-op path's hot code lies together and its
common branches fall through: that path is cold in the caches at every op of a model, and
its layout, not its instruction count, is what it costs (docs/device/architecture.md,
Performance, Session 13). The run is a training step as users write one, on `neuron`: a
small transformer with dropout, rotary-style halves, attention and a SiLU MLP, AdamW
per-tensor and foreach, then no-grad eval forwards. Only torch is needed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import torchferry.device


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(width), nn.RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        half = q.shape[-1] // 2
        q = q * 0.5 + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * 0.5
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous()
        x = x + self.drop(self.out(attended.view(b, t, d)))
        return x + self.drop(self.down(F.silu(self.up(self.norm2(x)))))


def main() -> None:
    torchferry.device.enable()
    torch.manual_seed(0)
    vocab, width = 512, 64
    model = nn.Sequential(nn.Embedding(vocab, width), Block(width, 4), Block(width, 4), nn.Linear(width, vocab))
    model = model.to("neuron").train()
    ids = torch.randint(0, vocab, (2, 32)).to("neuron")
    for foreach in (False, None):  # per-tensor AdamW, then the default (foreach on an accelerator)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
        for _ in range(30):
            optimizer.zero_grad(set_to_none=True)
            logits = model(ids)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            loss.item()
    model.eval()
    with torch.no_grad():
        for _ in range(10):
            model(ids).sum().item()


if __name__ == "__main__":
    main()
