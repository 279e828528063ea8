"""Planted: a hard-coded .cuda() call."""
import torch
from torch import nn

model = nn.Linear(4, 1).cuda()
