"""Four SGD steps of a small model with no dropout, and no seed of its own (torchferry seeds it)."""
import torch
from torch import nn

dev = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1)).to(dev)
x, y = torch.randn(32, 8).to(dev), torch.randn(32, 1).to(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(4):
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()
