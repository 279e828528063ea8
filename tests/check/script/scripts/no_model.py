"""Planted: no nn.Module called and no backward(): tensor arithmetic only, nothing torchferry can judge."""
import torch
from _common import device

x = torch.randn(8, 8, device=device())
print((x @ x.T).trace().item())
