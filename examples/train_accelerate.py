"""An `accelerate` training loop, as users write it: `Accelerator()`, `prepare`, `accelerator.backward`,
gradient accumulation, clipping, and `accelerator.save` of the unwrapped state dict. Accelerate picks
the device itself, so `ferry check -- python examples/train_accelerate.py` (or `-- accelerate launch
examples/train_accelerate.py`) runs it unchanged.

    python examples/train_accelerate.py --steps 8 --out runs/accelerate
"""

import argparse
import os

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TORCHFERRY_CHECK_OUTPUT", "runs"), "accelerate"),
                        help="where to write checkpoints (default: runs/accelerate; under `ferry check`, each run's own folder)")
    args = parser.parse_args()

    accelerator = Accelerator(gradient_accumulation_steps=2)
    set_seed(0)
    x = torch.randn(256, 32)
    y = (x @ torch.randn(32, 1)).squeeze(-1) + 0.1 * torch.randn(256)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    steps = 0
    model.train()
    while steps < args.steps:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(xb).squeeze(-1), yb)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                steps += 1
                if steps == args.steps:
                    break
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        os.makedirs(args.out, exist_ok=True)
        accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(args.out, "model.pt"))


if __name__ == "__main__":
    main()
