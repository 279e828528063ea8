"""Planted: a tensor left on the CPU (the weights of the loss), mixed with device tensors on line 12."""
import torch
from _common import device, model_and_data

dev = device()
model, x, y = model_and_data(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
weights = torch.ones(32, 1)  # left on the CPU
for _ in range(3):
    optimizer.zero_grad()
    out = model(x)
    loss = ((out - y) ** 2 * weights).mean()
    loss.backward()
    optimizer.step()
