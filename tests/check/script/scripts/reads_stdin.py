"""Planted: trains two steps, then waits for input that never comes."""
import sys

import torch
from _common import device, model_and_data

model, x, y = model_and_data(device())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()
print("waiting for input", flush=True)
sys.stdin.readline()
