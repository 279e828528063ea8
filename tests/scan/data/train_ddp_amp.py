"""Train a small classifier with DistributedDataParallel and mixed precision.

Written for the `ferry scan` tests in the style of common public training scripts: every
CUDA tie-in below is a planted hazard, and test_training_script.py lists them by line.

    torchrun --nproc_per_node=8 train_ddp_amp.py --epochs 10
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 python train_ddp_amp.py --steps 2
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    from apex.optimizers import FusedAdam  # faster on big models
except ImportError:
    FusedAdam = None


class Net(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64, classes: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=-1, help="stop after this many steps (-1 = all)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--profile", action="store_true", help="time each step with CUDA events")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--save", default=None)
    return parser.parse_args()


def setup():
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    return rank, world_size, local_rank


def main():
    args = parse_args()
    rank, world_size, local_rank = setup()
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.backends.cudnn.benchmark = True  # input shapes never change

    device = torch.device("cuda")
    model = Net().cuda()
    if args.resume:
        model.load_state_dict(torch.load(args.resume))
    model = DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)
    if args.compile:
        model = torch.compile(model, mode="max-autotune", dynamic=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
    if args.pin_memory:
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                            pin_memory=True, pin_memory_device="cuda")
    else:
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    step = 0
    correct = torch.zeros((), device="cuda")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            y = y.to(device, non_blocking=True)
            if args.profile:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=args.amp):  # fp16 on tensor cores
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            correct += (logits.argmax(-1) == y).sum()
            if args.profile:
                end.record()
                torch.cuda.synchronize()
                print(f"step time {start.elapsed_time(end):.2f} ms")
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} device={x.device.type} cuda={x.is_cuda}")
            step += 1
            if step == args.steps:
                break

    dist.all_reduce(correct)
    if rank == 0:
        print(f"train accuracy {correct.item() / len(data):.3f}")
        if torch.cuda.is_available():
            print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
        if args.save:
            torch.save(model.module.state_dict(), args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
