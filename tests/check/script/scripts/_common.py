"""Shared by the planted scripts: a tiny model trained a few steps on the device the script finds itself."""

import torch
from torch import nn


def device() -> torch.device:
    return torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


def model_and_data(dev: torch.device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(dev)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    return model, x.to(dev), y.to(dev)
