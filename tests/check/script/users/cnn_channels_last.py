"""A small CNN trained as torchvision's classification reference does, with its --channels-last flag."""
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--channels-last", action="store_true")
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
model.to(device)
if args.channels_last:
    model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(0)
for step in range(args.steps):
    image = torch.randn(4, 3, 16, 16, generator=g)
    target = torch.randint(0, 10, (4,), generator=g)
    image, target = image.to(device, non_blocking=True), target.to(device)
    if args.channels_last:
        image = image.contiguous(memory_format=torch.channels_last)
    loss = F.cross_entropy(model(image), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
