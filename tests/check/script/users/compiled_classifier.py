"""A classifier trained through torch.compile(model) (no backend named), AdamW, a cosine schedule, clipping and
dropout."""
import argparse
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 10)).to(device)
model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
for step in range(args.steps):
    xb, yb = x[step * 8:(step + 1) * 8].to(device), y[step * 8:(step + 1) * 8].to(device)
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    print(step, loss.item())
