"""Resumes from its checkpoint when one exists, as long jobs on preemptible machines do; its device chosen the way
TorchNeuron's users write it."""
import os
import torch
import torch.nn as nn

device = "neuron" if hasattr(torch, "neuron") and torch.neuron.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
start = 0
if os.path.exists("ckpt.pt"):
    state = torch.load("ckpt.pt", map_location=device)
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
    print("resumed at", start)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(start, 10):
    loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 3 == 2:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, "ckpt.pt")
    print(step, loss.item())
