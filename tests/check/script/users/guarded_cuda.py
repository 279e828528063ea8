"""A training script that names CUDA only in branches CUDA takes, with a --gpu flag and an nccl default, as users
write them: it trains unchanged on any accelerator torch.accelerator finds."""
import argparse
import os

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", action="store_true", help="pin to GPU 0 (CUDA only)")
parser.add_argument("--backend", default="nccl", help="distributed backend when launched with torchrun")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()
torch.manual_seed(0)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
if device.type == "cuda":
    torch.backends.cudnn.benchmark = True
if args.gpu:
    torch.cuda.set_device(0)
if "RANK" in os.environ:
    torch.distributed.init_process_group(args.backend)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
if device.type == "cuda":
    model = model.cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(32, 10), torch.randint(0, 2, (32,))
for step in range(args.steps):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    opt.step()
torch.save(model.state_dict(), "guarded.pt")
