"""Training with validation and early stopping: the best model's state dict is kept in memory and saved at the end."""
import copy
import sys

import torch
import torch.nn as nn

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-2)
x, y = torch.randn(64, 8), torch.randn(64, 1)
xv, yv = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
best, best_state = float("inf"), None
for step in range(10):
    xb, yb = x[(step % 4) * 16:(step % 4 + 1) * 16].to(device), y[(step % 4) * 16:(step % 4 + 1) * 16].to(device)
    loss = nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        val = nn.functional.mse_loss(model(xv), yv).item()
    if val < best:
        best, best_state = val, copy.deepcopy({k: v.cpu() for k, v in model.state_dict().items()})
torch.save(best_state, sys.argv[1] if len(sys.argv) > 1 else "best.pt")
print("best", best)
