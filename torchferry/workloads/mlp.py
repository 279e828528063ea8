"""Plain-PyTorch MLP regressor. Imports only torch: the exit check rebuilds it by file path."""

from __future__ import annotations

import torch
from torch import nn

WIDTHS = {"tiny": 64, "small": 512, "base": 2048}


def build(size: str = "tiny", batch_size: int = 16, seq_len: int = 32, mode: str = "training") -> dict:
    """Return model, batch(device, seed) -> (x, y) and an MSE loss; `seq_len` is the input width."""
    width = WIDTHS[size]
    model = nn.Sequential(
        nn.Linear(seq_len, width), nn.GELU(), nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1)
    )

    def batch(device, seed: int):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(batch_size, seq_len, generator=gen)
        y = x.sum(dim=1, keepdim=True).sin()
        return {"x": x.to(device), "y": y.to(device)}

    return {
        "model": model,
        "batch": batch,
        "inputs": lambda batch: (batch["x"],),
        "loss": lambda output, batch: nn.functional.mse_loss(output, batch["y"]),
        "generates": False,
    }
