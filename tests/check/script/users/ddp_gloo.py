"""DDP as the PyTorch tutorial writes it: torchrun, a backend chosen by CUDA availability, DistributedSampler.

Its process group is "gloo" wherever CUDA is not, and gloo's collectives refuse an accelerator's tensors: the target
fails in DDP's constructor, eight lines later. --portable is the fix `ferry scan` gives (the default backend of the
accelerator)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

backend = "nccl" if torch.cuda.is_available() else "gloo"
if "--portable" in sys.argv:
    backend = dist.get_default_backend_for_device(torch.accelerator.current_accelerator()) \
        if torch.accelerator.is_available() else "gloo"
dist.init_process_group(backend)
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
if device.type != "cpu":
    torch.accelerator.set_device_index(local_rank)
    device = torch.device(device.type, local_rank)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(device))
data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True, seed=0))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad(); loss.backward(); opt.step()
    if rank == 0:
        print(epoch, loss.item())
if rank == 0:
    torch.save(model.module.state_dict(), os.environ.get("DDP_OUT", "ddp.pt"))
dist.destroy_process_group()
