"""Overhead of `ferry check -- COMMAND`'s recorders on the tiny example's step time: recorders on vs off.

Runs examples/train_loop.py unchanged in fresh processes, alternating recorders off and on (ABBA
rounds, the same seed and steps), on the CPU and on the built-in neuron device (where the
recorders also read the rehearsal's counters every step). Each process times its own optimizer
steps with a post-step hook of this benchmark's (present in both conditions, so it cancels out);
the recorders are switched on exactly as `ferry check` does, by TORCHFERRY_RECORD in the child's
environment. The figure is the ratio of the medians of the steady steps (after the first quarter)
over all rounds. Target: at most 3% (PASS/FAIL printed).

    python bench/script_overhead.py [--steps 40] [--rounds 2] [--devices cpu,neuron]

Needs the recorder entry point installed (`pip install --no-build-isolation -e .`).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_loop.py"
TARGET = 0.03


def child(out: str, steps: int, workdir: str) -> None:
    """Run the example unchanged, timing each optimizer step with a post-step hook of its own."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    ends: list[float] = []
    register_optimizer_step_post_hook(lambda *_: ends.append(time.perf_counter()))
    sys.argv = [str(EXAMPLE), "--steps", str(steps), "--out", workdir, "--save-every", str(10 * steps)]
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    Path(out).write_text(json.dumps([b - a for a, b in zip(ends, ends[1:])]))


def run(device: str, recorders: bool, steps: int, tmp: Path) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHFERRY_RECORD", "TORCHFERRY_DEVICE")}
    if device != "cpu":
        env["TORCHFERRY_DEVICE"] = device
    if recorders:
        env["TORCHFERRY_RECORD"] = str(tmp / "records")
    out = tmp / "times.json"
    subprocess.run([sys.executable, __file__, "--child", str(out), "--steps", str(steps), "--workdir", str(tmp / "w")],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    durations = json.loads(out.read_text())
    return durations[len(durations) // 4:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--devices", default="cpu,neuron")
    parser.add_argument("--child")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.workdir)
        return
    failed = False
    print(f"{'device':<8}{'off median':>14}{'on median':>14}{'overhead':>10}  verdict (target <= {TARGET:.0%})")
    for device in args.devices.split(","):
        times: dict[bool, list[float]] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for recorders in ((False, True) if r % 2 == 0 else (True, False)):
                    times[recorders] += run(device, recorders, args.steps, Path(tmp))
        off, on = statistics.median(times[False]), statistics.median(times[True])
        overhead = on / off - 1
        failed |= overhead > TARGET
        print(f"{device:<8}{off * 1e3:>12.2f}ms{on * 1e3:>12.2f}ms{overhead:>10.1%}  "
              f"{'PASS' if overhead <= TARGET else 'FAIL'} ({len(times[False])} + {len(times[True])} steady steps)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
