"""Planted: trains on the CPU, and on an accelerator waits for ever after its second step (a stall on one side)."""
import time

import torch

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
model = torch.nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    opt.zero_grad()
    model(torch.ones(2, 4, device=device)).sum().backward()
    opt.step()
    if step == 1 and device.type != "cpu":
        while True:
            time.sleep(0.1)  # waits here, as a collective for a dead peer would
