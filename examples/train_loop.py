"""A plain PyTorch training loop, as users write it: DataLoader, AdamW, a warm-up/cosine scheduler,
gradient clipping, dropout, and torch.save checkpoints. It picks its device the usual way
(torch.accelerator), so `ferry check -- python examples/train_loop.py --steps 20` runs it unchanged
on the reference and on the target.

    python examples/train_loop.py --steps 20 --out runs/loop
"""

import argparse
import math
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TinyLM(nn.Module):
    """A small next-token model: embedding, two transformer blocks, a tied output head."""

    def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = torch.triu(torch.full((seq, seq), float("-inf"), device=tokens.device), diagonal=1)
        return self.head(self.norm(self.blocks(self.embed(tokens), mask=mask)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TORCHFERRY_CHECK_OUTPUT", "runs"), "train_loop"),
                        help="where to write checkpoints (default: runs/train_loop; under `ferry check`, each run's own folder)")
    parser.add_argument("--save-every", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    data = torch.randint(0, 256, (args.batch_size * 16, args.seq_len + 1))
    loader = DataLoader(TensorDataset(data), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    os.makedirs(args.out, exist_ok=True)

    step = 0
    model.train()
    while step < args.steps:
        for (batch,) in loader:
            batch = batch.to(device)
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            if step % args.save_every == 0 or step == args.steps:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           os.path.join(args.out, "checkpoint.pt"))
            if step == args.steps:
                break
    torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
    print(f"trained {step} steps; final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
