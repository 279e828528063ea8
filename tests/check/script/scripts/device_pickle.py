"""Planted: a checkpoint that pickles a device object beside the weights."""
import sys

import torch
from _common import device, model_and_data

dev = device()
model, x, y = model_and_data(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()
torch.save({"model": model.state_dict(), "device": dev}, sys.argv[1])
