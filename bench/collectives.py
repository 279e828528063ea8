"""all_reduce and all_gather bandwidth of the `neuron` process group versus gloo on CPU.

The `neuron` backend runs gloo on zero-copy host views, so it must cost no more than
gloo itself: the ratio neuron / gloo of the time per collective should be <= 1.05.

    python bench/collectives.py [--nproc 2] [--mib 16] [--iters 20]

Each size is timed side by side in the same processes: one group over the `neuron`
backend (neuron tensors), one plain gloo group (CPU tensors), alternating rounds.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import torch
import torch.multiprocessing as mp


def _time(fn, iters: int) -> float:
    import torch.distributed as dist

    fn()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def _worker(rank: int, world: int, port: int, mib: float, iters: int, rounds: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world))
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    device = torch.device("neuron", rank)
    torch.neuron.set_device(device)
    dist.init_process_group("neuron", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    numel = int(mib * 2**20) // 4
    cases = {}
    for name, dev, group in (("gloo-cpu", torch.device("cpu"), gloo), ("neuron", device, None)):
        x = torch.ones(numel, device=dev)
        out = torch.empty(numel * world, device=dev)
        shard = torch.ones(numel, device=dev)
        cases[name] = {
            "all_reduce": lambda x=x, g=group: dist.all_reduce(x, group=g),
            "all_gather_into_tensor": lambda o=out, s=shard, g=group: dist.all_gather_into_tensor(o, s, group=g),
        }
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):  # alternate so drift hits both sides alike
        for name, ops in cases.items():
            for op, fn in ops.items():
                seconds = _time(fn, iters)
                best[(name, op)] = min(best.get((name, op), float("inf")), seconds)
    if rank == 0:
        print(f"{world} ranks, {mib:g} MiB per rank, best of {rounds} x {iters} iterations")
        print(f"{'collective':<24}{'gloo-cpu GB/s':>14}{'neuron GB/s':>13}{'ratio (time)':>14}")
        for op in ("all_reduce", "all_gather_into_tensor"):
            gloo_s, neuron_s = best[("gloo-cpu", op)], best[("neuron", op)]
            bytes_moved = numel * 4 * (world if op != "all_reduce" else 1)
            print(f"{op:<24}{bytes_moved / gloo_s / 1e9:>14.2f}{bytes_moved / neuron_s / 1e9:>13.2f}"
                  f"{neuron_s / gloo_s:>14.3f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--mib", type=float, default=16.0)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_worker, args=(args.nproc, port, args.mib, args.iters, args.rounds), nprocs=args.nproc)


if __name__ == "__main__":
    main()
