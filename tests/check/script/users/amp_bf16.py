"""Mixed precision as the AMP recipe writes it for any accelerator: autocast to bfloat16 on the device; the weights
saved as CPU tensors; ``--compile`` compiles the model (nanoGPT's switch)."""
import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--out", default="amp.pt")
p.add_argument("--compile", action="store_true")
args = p.parse_args()
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 1)).to(device)
if args.compile:
    model = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 16), torch.randn(128, 1)
for step in range(8):
    xb, yb = x[step * 16:(step + 1) * 16].to(device), y[step * 16:(step + 1) * 16].to(device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        out = model(xb)
        loss = nn.functional.mse_loss(out.float(), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
torch.save({k: v.cpu() for k, v in getattr(model, "_orig_mod", model).state_dict().items()}, args.out)
