"""What the foreach ops of PyTorch's default AdamW cost on `neuron` against the CPU, op by op.

A diagnostic beside `bench/eager_overhead.py` (which holds the targets). On an accelerator,
PyTorch's AdamW defaults to its foreach implementation, which the CPU does not; so the tiny
default case compares neuron's foreach step with the CPU's per-tensor one. This prints, for
the foreach ops that step calls, over lists shaped like the tiny model's parameters, the
median time per call on each device, interleaved call block by call block (the order flips
each round), and the same for a per-tensor `mul_` loop. Host figures only.

    python bench/foreach_ops.py                 # one thread, 21 tensors of 64x64, 300 rounds
    python bench/foreach_ops.py --threads 2 --tensors 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import torch

import torchferry.device

CALLS = 50  # calls per timed block: one block is one sample


def ops(device: str, count: int) -> dict[str, Callable[[], object]]:
    """The calls of PyTorch's foreach AdamW step (torch/optim/adamw.py, `_multi_tensor_adamw`), on ``device``."""
    generator = torch.Generator().manual_seed(0)
    params, grads, avgs, sqs = ([torch.rand(64, 64, generator=generator).to(device) for _ in range(count)]
                                for _ in range(4))
    scalars = [0.5] * count
    return {
        "_foreach_mul_ (decay)": lambda: torch._foreach_mul_(params, 0.999),
        "_foreach_lerp_": lambda: torch._foreach_lerp_(avgs, grads, 0.1),
        "_foreach_addcmul_": lambda: torch._foreach_addcmul_(sqs, grads, grads, 0.001),
        "_foreach_sqrt": lambda: torch._foreach_sqrt(sqs),
        "_foreach_div_ (list)": lambda: torch._foreach_div_(sqs, scalars),
        "_foreach_add_": lambda: torch._foreach_add_(sqs, 1e-8),
        "_foreach_addcdiv_ (list)": lambda: torch._foreach_addcdiv_(params, avgs, sqs, scalars),
        "per-tensor mul_ loop": lambda: [p.mul_(0.999) for p in params],
    }


def block(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - start) / CALLS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--tensors", type=int, default=21, help="tensors per list (the tiny model has 21 parameters)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (torch.set_num_threads)")
    args = parser.parse_args(argv)
    if args.rounds < 20 or args.tensors < 1:
        parser.error(f"--rounds {args.rounds} --tensors {args.tensors}: at least 20 rounds and 1 tensor")
    torchferry.device.enable()
    torch.set_num_threads(args.threads)
    calls = {device: ops(device, args.tensors) for device in ("cpu", "neuron")}
    for device in calls:  # warm-up: first meetings, signatures, caches
        for call in calls[device].values():
            block(call)
    print(f"{args.tensors} tensors of 64x64 per list, {args.threads} thread(s), {args.rounds} rounds of "
          f"{CALLS} calls, load average {os.getloadavg()[0]:.2f}")
    for name in calls["cpu"]:
        times: dict[str, list[float]] = {"cpu": [], "neuron": []}
        for r in range(args.rounds):
            for device in (("cpu", "neuron") if r % 2 == 0 else ("neuron", "cpu")):
                times[device].append(block(calls[device][name]))
        cpu, neuron = statistics.median(times["cpu"]), statistics.median(times["neuron"])
        print(f"  {name:26s} cpu {cpu * 1e6:7.1f} us  neuron {neuron * 1e6:7.1f} us  "
              f"neuron - cpu {(neuron - cpu) * 1e6:+6.1f} us  ratio {neuron / cpu:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
