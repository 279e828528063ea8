"""Planted: backward() but never an optimizer step (gradients only)."""
import torch
from _common import device, model_and_data

model, x, y = model_and_data(device())
for _ in range(3):
    model.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
