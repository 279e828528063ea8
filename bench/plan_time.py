"""Time of an 8B plan: `ferry plan --size 8b` (Llama-3-8B, FSDP2 over trn2.48xlarge's 64 logical
cores, one step traced on FakeTensor) must take under 2 minutes on a 2-core machine.

    python bench/plan_time.py [--repeats 3] [--size 8b] [--checkpointing off]

Each repeat is a fresh `python -m torchferry plan` process, so the time includes importing torch
and transformers, building the model on the meta device, tracing and writing the reports: what a
user waits for. It prints each time, the median, its ratio to the target and PASS/FAIL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 120.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", default="8b")
    parser.add_argument("--checkpointing", default="off")
    args = parser.parse_args()
    times = []
    with tempfile.TemporaryDirectory(prefix="ferry-plan-bench-") as out:
        command = [sys.executable, "-m", "torchferry", "plan", "--size", args.size, "--checkpointing", args.checkpointing,
                   "-o", out, "-q"]
        for i in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            times.append(time.perf_counter() - start)
            if done.returncode not in (0, 3):  # 3: the plan ran and the layout does not fit
                print(done.stdout, done.stderr, sep="\n")
                print(f"ferry plan failed with exit code {done.returncode}")
                return 1
            print(f"repeat {i + 1}: {times[-1]:.1f} s")
    median = statistics.median(times)
    verdict = "PASS" if median < TARGET_S else "FAIL"
    print(f"{args.size} plan (checkpointing {args.checkpointing}), {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}: median {median:.1f} s, target < {TARGET_S:.0f} s, ratio {median / TARGET_S:.2f} {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
