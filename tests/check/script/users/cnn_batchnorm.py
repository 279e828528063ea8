"""A small CNN with BatchNorm, trained a few steps, then evaluated; its weights saved through a file object. The device
is a flag whose default names CUDA only where CUDA is, as many scripts write it."""
import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--norm", choices=("batch", "group"), default="batch")
p.add_argument("--out", default="cnn.pt")
args = p.parse_args()
torch.manual_seed(0)
x = torch.randn(64, 3, 16, 16)
y = (x.mean((1, 2, 3)) > 0).long()
norm = nn.BatchNorm2d(8) if args.norm == "batch" else nn.GroupNorm(2, 8)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), norm, nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(8, 2)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    xb, yb = x[step * 8:(step + 1) * 8].to(args.device), y[step * 8:(step + 1) * 8].to(args.device)
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
model.eval()
with torch.no_grad():
    acc = (model(x.to(args.device)).argmax(1).cpu() == y).float().mean().item()
print(f"eval accuracy {acc:.3f}")
with open(args.out, "wb") as f:
    torch.save(model.state_dict(), f)
