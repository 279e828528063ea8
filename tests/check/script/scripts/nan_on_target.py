"""Planted: a loss that goes NaN on an accelerator only (from the third step)."""
import torch
from _common import device, model_and_data

dev = device()
model, x, y = model_and_data(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    if dev.type != "cpu" and step >= 2:
        loss = loss * float("nan")
    loss.backward()
    optimizer.step()
