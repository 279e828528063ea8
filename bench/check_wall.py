"""The whole `ferry check -- COMMAND` against running the script twice: wall time, side by side in one run.

A check of a script runs it on the reference and on the target (and, where the two sides cannot
run the same kernels, once more on the reference), reloads its checkpoints and scans it; what needs
no timing overlaps. Its wall time, process start to exit of `ferry check --steps N -- python
examples/train_loop.py`, is compared with the plain script run once on the CPU and once on the
built-in device (`python examples/train_loop.py --steps N`, no recorders), interleaved in rounds.
Target: the check takes at most 1.5 x (plain reference + plain target), medians over the rounds
(PASS/FAIL printed).

    python bench/check_wall.py [--steps 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_loop.py"
TARGET = 1.5


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("TORCHFERRY_DEVICE", "TORCHFERRY_RECORD")}
    cpu = {**base, "CUDA_VISIBLE_DEVICES": ""}
    neuron = {**base, "TORCHFERRY_DEVICE": "neuron", "TORCHFERRY_RNG": "host", "TORCHFERRY_FALLBACK": "silent"}
    script = [sys.executable, str(EXAMPLE), "--steps", str(args.steps), "--save-every", str(args.steps)]
    walls: dict[str, list[float]] = {"reference": [], "target": [], "check": []}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for r in range(args.rounds):
            runs = [("reference", script + ["--out", "plain"], cpu), ("target", script + ["--out", "plain"], neuron),
                    ("check", [sys.executable, "-m", "torchferry", "check", "-q", "-o", "rep", "--steps",
                               str(args.steps), "--", *script[:1], *script[1:], "--out", "checked"], base)]
            for name, argv, env in (runs if r % 2 == 0 else runs[::-1]):
                walls[name].append(timed(argv, env, cwd))
    ref, target, check = (statistics.median(walls[k]) for k in ("reference", "target", "check"))
    ratio = check / (ref + target)
    print(f"plain reference {ref:.2f} s, plain target {target:.2f} s, ferry check {check:.2f} s (medians of "
          f"{args.rounds}): {ratio:.2f} x their sum; target <= {TARGET:g}: {'PASS' if ratio <= TARGET else 'FAIL'}")
    sys.exit(0 if ratio <= TARGET else 1)


if __name__ == "__main__":
    main()
