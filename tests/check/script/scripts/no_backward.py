"""Planted: inference only, no backward()."""
import torch
from _common import device, model_and_data

model, x, _ = model_and_data(device())
with torch.no_grad():
    print(model(x).sum().item())
