"""Where a training step's eager overhead sits: forward, backward and optimizer, side by side.

A diagnostic beside `bench/eager_overhead.py` (which holds the targets): the tiny workload's
step (`torchferry.workloads.llama` "tiny", batch 2x32, per-tensor AdamW on both devices unless
`--foreach default`) runs on `cpu` and on `neuron` in one process, alternating which goes
first, and each phase is timed on its own: zero_grad and forward, `backward()`, and the
optimizer step with `loss.item()`. `--no-grad` times a no-grad forward alone instead. It
prints the median of each phase per device and their ratio. Host figures only.

    python bench/eager_phases.py                    # one thread, 300 pairs
    python bench/eager_phases.py --no-grad --pairs 1000
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from typing import Callable

import torch

import torchferry.device
from torchferry.workloads import llama

PHASES = ("forward", "backward", "optimizer", "step")


def make_step(workload: dict, device: str, foreach: bool | None, no_grad: bool) -> Callable[[], tuple[float, ...]]:
    model = copy.deepcopy(workload["model"]).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=foreach)
    inputs = workload["batch"](device, 0)

    def step() -> tuple[float, ...]:
        if no_grad:
            start = time.perf_counter()
            with torch.no_grad():
                model(**inputs).loss
            return (time.perf_counter() - start,)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        loss.item()
        t3 = time.perf_counter()
        return (t1 - t0, t2 - t1, t3 - t2, t3 - t0)

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (torch.set_num_threads)")
    parser.add_argument("--foreach", choices=("per-tensor", "default"), default="per-tensor",
                        help="AdamW's implementation: per-tensor on both, or PyTorch's default per device")
    parser.add_argument("--no-grad", action="store_true", help="time a no-grad forward alone")
    args = parser.parse_args(argv)
    torchferry.device.enable()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    workload = llama.build("tiny")
    foreach = None if args.foreach == "default" else False
    steps = {device: make_step(workload, device, foreach, args.no_grad) for device in ("cpu", "neuron")}
    for _ in range(10):
        for step in steps.values():
            step()
    samples: dict[str, list[tuple[float, ...]]] = {"cpu": [], "neuron": []}
    for i in range(args.pairs):
        for device in (("cpu", "neuron") if i % 2 == 0 else ("neuron", "cpu")):
            samples[device].append(steps[device]())
    names = ("no-grad forward",) if args.no_grad else PHASES
    print(f"tiny step, {args.threads} thread(s), AdamW {args.foreach}, {args.pairs} interleaved pairs, "
          f"load average {os.getloadavg()[0]:.2f}")
    for k, name in enumerate(names):
        cpu = statistics.median(s[k] for s in samples["cpu"])
        neuron = statistics.median(s[k] for s in samples["neuron"])
        ratio = statistics.median(n[k] / c[k] for c, n in zip(samples["cpu"], samples["neuron"]))
        print(f"  {name:16s} cpu {cpu * 1e3:7.3f} ms  neuron {neuron * 1e3:7.3f} ms  "
              f"median ratio {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
