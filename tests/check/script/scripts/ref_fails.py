"""Planted: the script's own bug, on every device."""
import torch

raise ValueError("the data folder is empty")
