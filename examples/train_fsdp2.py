"""A 2-rank FSDP2 training script for torchrun, as users write it: the default process-group backend of
the accelerator, `fully_shard` on each block and the root, AdamW, and a full state dict saved by rank 0.
It finds its device through torch.accelerator and LOCAL_RANK, so
`ferry check -- torchrun --nproc-per-node 2 examples/train_fsdp2.py` runs it unchanged.

    torchrun --nproc-per-node 2 examples/train_fsdp2.py --steps 6 --out runs/fsdp2
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TORCHFERRY_CHECK_OUTPUT", "runs"), "fsdp2"),
                        help="where to write checkpoints (default: runs/fsdp2; under `ferry check`, each run's own folder)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.accelerator.is_available():
        device = torch.device(torch.accelerator.current_accelerator().type, local_rank)
        torch.accelerator.set_device_index(local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=dist.get_default_backend_for_device(device))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(3)], nn.Linear(32, 4)).to(device)
    for block in model[:3]:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    for _ in range(args.steps):
        x = torch.randn(8, 32, generator=generator).to(device)
        y = torch.randint(0, 4, (8,), generator=generator).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        os.makedirs(args.out, exist_ok=True)
        torch.save(state, os.path.join(args.out, "model.pt"))
    # Every rank's last collective is finished before any rank tears the group down. Without it, about one run
    # in 25 aborts at exit on a 2-core machine (PyTorch 2.13, gloo): destroy_process_group leaves gloo's
    # worker threads running while FSDP still holds the group, and a worker that drops a finished collective's
    # tensors during interpreter shutdown calls std::terminate. The barrier's wait releases the GIL, so the
    # workers finish that clean-up first.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
