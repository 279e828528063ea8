"""How many more instructions the tiny training step executes on `neuron` than on the CPU.

A diagnostic beside `bench/eager_overhead.py` (which holds the targets). Wall time on a shared
VM moves by more than the device's whole overhead from one process to the next; an
instruction count does not. This runs the tiny step (`torchferry.workloads.llama` "tiny",
batch 2x32: zero_grad, forward, backward, AdamW, `loss.item()`, the same step as
`bench/eager_phases.py`) under valgrind's callgrind, for each device, once with `--low` steps
and once with `--high`, and prints the instructions of one step: the difference of the two
runs' totals over the difference in steps, so that the import and the warm-up cancel out.
If the device's extra time were its extra instructions, the two ratios would agree; where
the instruction ratio is lower, the rest of the time goes elsewhere (caches, branches,
memory). Host figures only. Needs valgrind; four runs under it take several minutes each.

    python bench/step_instructions.py                    # per-tensor AdamW on both, 10 and 40 steps
    python bench/step_instructions.py --foreach default  # PyTorch's default AdamW on each device
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOTAL = re.compile(r"==\d+== Collected : (\d+)")
# callgrind counts every thread: an idle BLAS or OpenMP worker spinning in the background would
# add millions of instructions that belong to neither device's step.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_steps(device: str, steps: int, foreach: str) -> None:
    """The child: warm up, then run `steps` steps (the part callgrind counts is the whole process)."""
    import torch

    import torchferry.device
    from eager_phases import make_step
    from torchferry.workloads import llama

    torchferry.device.enable()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    step = make_step(llama.build("tiny"), device, None if foreach == "default" else False, no_grad=False)
    for _ in range(10 + steps):
        step()


def instructions(device: str, steps: int, foreach: str) -> int:
    """The instructions callgrind counts in a child process that runs `steps` steps."""
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out", sys.executable, __file__,
             "--run", device, str(steps), "--foreach", foreach],
            capture_output=True, text=True, env={**os.environ, **ONE_THREAD, "TORCHFERRY_FALLBACK": "silent"},
        )
    found = TOTAL.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run of {steps} {device} steps failed (exit {result.returncode}):\n"
                         f"{result.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", type=int, default=10, help="steps of the first run (default 10)")
    parser.add_argument("--high", type=int, default=40, help="steps of the second run (default 40)")
    parser.add_argument("--foreach", choices=("per-tensor", "default"), default="per-tensor",
                        help="AdamW's implementation: per-tensor on both, or PyTorch's default per device")
    parser.add_argument("--run", nargs=2, metavar=("DEVICE", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        run_steps(args.run[0], int(args.run[1]), args.foreach)
        return 0
    if args.high <= args.low or args.low < 0:
        parser.error(f"--low {args.low} --high {args.high}: need 0 <= low < high")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    per_step = {}
    for device in ("cpu", "neuron"):
        low, high = instructions(device, args.low, args.foreach), instructions(device, args.high, args.foreach)
        per_step[device] = (high - low) / (args.high - args.low)
        print(f"  {device:6s} {per_step[device]:14,.0f} instructions a step ({args.low} and {args.high} steps: "
              f"{low:,} and {high:,})", flush=True)
    print(f"tiny step, AdamW {args.foreach}, one thread: neuron/cpu instruction ratio "
          f"{per_step['neuron'] / per_step['cpu']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
