"""What `ferry check -- COMMAND`'s recorders cost the script they measure: step time and host peak memory, on vs off.

Runs each script unchanged in fresh processes, alternating recorders off and on (ABBA rounds, the
same seed and steps), on the CPU and on the built-in neuron device (where the recorders also read
the rehearsal's counters every step). Each process times its own steps with a hook of this
benchmark's (present in both conditions, so it cancels out): an optimizer post-step hook, or, for
a script without an optimizer, the end of each backward call. The recorders are switched on
exactly as `ferry check` does, by TORCHFERRY_RECORD in the child's environment. Each process runs one
intra-op thread by default (--threads): what the recorders add is Python work per step, the same at any
thread count, while two threads on this project's 2-vCPU machine made the same script's steady step vary
by about 20% from one process to the next (9.4 to 13.5 ms for loop on neuron), more than the effect. The figures: the
median over the rounds of each round's ratio (the median steady step, after the first quarter, of its
recorders-on process over its recorders-off one: two processes side by side), and the ratio of the median
host peak RSS (``ru_maxrss``) of the processes. Targets: at most +3% time and +10% memory (PASS/FAIL
printed; NOISY when the recorders-off processes' own medians drift from one round to the next by more than
the time target, a machine too busy to tell 3%: seen here at 11.6 to 16.5 ms for one script), and the time the recorders add to
a step in milliseconds (a fixed cost per step: a loss read and a gradient norm), which is what a step of a
real model, far longer than these, pays. Beside it, measured inside the processes with the recorders on,
so that a machine whose speed drifts from one process to the next cannot hide it: the time spent in the
recorders' own per-step hooks (loss read, backward end, a clip_grad_norm_'s norm read, before and after each
optimizer step) per steady
step, as a share of that step ("own"): the direct cost, a lower bound of the A/B difference, held to the
same +3% (OWN PASS/FAIL), which drift between processes cannot move.

    python bench/script_overhead.py [--steps 40] [--rounds 2] [--devices cpu,neuron] [--scripts loop,lm] [--threads 1]
    python bench/script_overhead.py --instructions 14,42 --devices neuron --scripts lm

`--instructions LOW,HIGH` counts instead of timing, for a machine whose speed drifts from one process to
the next by more than the effect: each condition runs twice under valgrind's callgrind (one thread), with
LOW and HIGH steps, and one step's instructions are the difference of the two totals over the difference
in steps (import and warm-up cancel out). The recorders-on count includes this benchmark's clock around
their hooks (a few calls a step), so it errs against the recorders. Instructions are not time (caches,
branches and memory are not in them), so this is a second view beside the A/B, held to the same +3%.

Needs the recorder entry point installed (`pip install --no-build-isolation -e .`).
"""

from __future__ import annotations

import argparse
import json
import re
import os
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {  # name -> (the script, its arguments for N steps and an output folder)
    "loop": (ROOT / "examples" / "train_loop.py", lambda n, out: ["--steps", str(n), "--out", out,
                                                                  "--save-every", str(10 * n)]),
    # 7 steps an epoch: the epochs that make at least N steps (7 alone leave 5 steady steps, too few to tell 3%)
    "lm": (ROOT / "tests" / "check" / "script" / "users" / "word_lm.py",
           lambda n, out: ["--epochs", str(-(-n // 7)), "--save", f"{out}/lm.pt"]),
}
TIME_TARGET, MEMORY_TARGET = 0.03, 0.10
NOISY = 0.15  # the spread (IQR / median) of the steady steps above which a miss says nothing


def child(out: str, script: str, steps: int, workdir: str) -> None:
    """Run a script unchanged, timing each step with a hook of its own; report the steps and the peak RSS."""
    own = [0.0]  # seconds spent inside the recorders' per-step hooks so far
    if os.environ.get("TORCHFERRY_RECORD"):  # wrapped before `import torch` installs them
        from torchferry.check.script import recorder

        for name in ("_loss", "_backward_done", "_clipped", "_before_step", "_after_step"):
            def timed(*args, _method=getattr(recorder.ScriptRecorder, name), **kwargs):  # noqa: ANN002, ANN003, ANN202
                start = time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    own[0] += time.perf_counter() - start

            setattr(recorder.ScriptRecorder, name, timed)
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    ends: list[float] = []
    owns: list[float] = []
    register_optimizer_step_post_hook(lambda *_: (ends.append(time.perf_counter()), owns.append(own[0])))
    backward_ends: list[float] = []
    backward_owns: list[float] = []
    original = torch.autograd.backward

    def backward(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a pass-through with a clock
        result = original(*args, **kwargs)
        backward_ends.append(time.perf_counter())
        backward_owns.append(own[0])
        return result

    torch.autograd.backward = backward
    path, arguments = SCRIPTS[script]
    Path(workdir).mkdir(parents=True, exist_ok=True)
    sys.argv = [str(path), *arguments(steps, workdir)]
    runpy.run_path(str(path), run_name="__main__")
    marks, own_marks = (ends, owns) if ends else (backward_ends, backward_owns)
    Path(out).write_text(json.dumps({"steps": [b - a for a, b in zip(marks, marks[1:])],
                                     "own": [b - a for a, b in zip(own_marks, own_marks[1:])],
                                     "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def child_env(device: str, recorders: bool, tmp: Path, threads: int) -> dict[str, str]:
    """The environment of one measured process: the device and the recorders as `ferry check` sets them."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHFERRY_RECORD", "TORCHFERRY_DEVICE")}
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if device != "cpu":
        env["TORCHFERRY_DEVICE"] = device
    if recorders:
        env["TORCHFERRY_RECORD"] = str(tmp / "records")
    return env


def child_command(script: str, steps: int, tmp: Path) -> list[str]:
    return [sys.executable, __file__, "--child", str(tmp / "measured.json"), "--script", script, "--steps", str(steps),
            "--workdir", str(tmp / "w")]


def run(script: str, device: str, recorders: bool, steps: int, tmp: Path, threads: int) -> dict:
    done = subprocess.run(child_command(script, steps, tmp), env=child_env(device, recorders, tmp, threads),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:  # the script's own output stays out of the table unless it failed
        sys.exit(f"{script} on {device} (recorders {'on' if recorders else 'off'}) exited {done.returncode}:\n"
                 + done.stderr[-4000:])
    measured = json.loads((tmp / "measured.json").read_text())
    measured["steps"] = measured["steps"][len(measured["steps"]) // 4:]
    measured["own"] = measured["own"][len(measured["own"]) // 4:]
    return measured


def instructions(script: str, device: str, recorders: bool, steps: int, tmp: Path) -> tuple[int, int]:
    """(instructions callgrind collected, steps the script made) of one process on one thread."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *child_command(script, steps, tmp)],
                          env=child_env(device, recorders, tmp, threads=1), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    collected = re.search(r"==\d+== Collected : (\d+)", done.stderr)
    if done.returncode or collected is None:
        sys.exit(f"{script} on {device} under callgrind exited {done.returncode}:\n" + done.stderr[-4000:])
    return int(collected.group(1)), len(json.loads((tmp / "measured.json").read_text())["steps"]) + 1


def count_instructions(scripts: list[str], devices: list[str], low: int, high: int) -> bool:
    """The per-step instruction table; True when a row misses the time target."""
    print(f"{'script':<7}{'device':<8}{'instr/step off':>16}{'on':>14}{'added':>10}  verdict (<= +{TIME_TARGET:.0%})")
    failed = False
    for script in scripts:
        for device in devices:
            per_step = {}
            with tempfile.TemporaryDirectory() as tmp:
                for recorders in (False, True):
                    (a, n_a), (b, n_b) = (instructions(script, device, recorders, n, Path(tmp)) for n in (low, high))
                    per_step[recorders] = (b - a) / (n_b - n_a)
            added = per_step[True] / per_step[False] - 1
            failed |= added > TIME_TARGET
            print(f"{script:<7}{device:<8}{per_step[False] / 1e6:>14.2f}M{per_step[True] / 1e6:>13.2f}M{added:>+10.1%}  "
                  f"{'PASS' if added <= TIME_TARGET else 'FAIL'}")
    return failed


def spread(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--devices", default="cpu,neuron")
    parser.add_argument("--scripts", default=",".join(SCRIPTS))
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of each process (OMP_NUM_THREADS)")
    parser.add_argument("--instructions", help="LOW,HIGH: count instructions per step under callgrind instead")
    parser.add_argument("--child")
    parser.add_argument("--script")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.script, args.steps, args.workdir)
        return
    if args.instructions:
        low, high = (int(n) for n in args.instructions.split(","))
        sys.exit(1 if count_instructions(args.scripts.split(","), args.devices.split(","), low, high) else 0)
    failed = False
    print(f"intra-op threads per process: {args.threads}")
    print(f"{'script':<7}{'device':<8}{'step off':>11}{'step on':>11}{'time':>8}{'peak off':>11}{'peak on':>11}"
          f"{'memory':>8}{'added':>9}{'own':>16}  verdict (time <= +{TIME_TARGET:.0%}, memory <= +{MEMORY_TARGET:.0%})")
    for script in args.scripts.split(","):
        for device in args.devices.split(","):
            times: dict[bool, list[float]] = {False: [], True: []}
            medians: dict[bool, list[float]] = {False: [], True: []}  # per process, in round order
            owns: list[float] = []
            peaks: dict[bool, list[int]] = {False: [], True: []}
            with tempfile.TemporaryDirectory() as tmp:
                for r in range(args.rounds):
                    for recorders in ((False, True) if r % 2 == 0 else (True, False)):
                        measured = run(script, device, recorders, args.steps, Path(tmp), args.threads)
                        times[recorders] += measured["steps"]
                        medians[recorders].append(statistics.median(measured["steps"]))
                        owns += measured["own"] if recorders else []
                        peaks[recorders].append(measured["peak_kib"])
            off, on = statistics.median(times[False]), statistics.median(times[True])
            peak_off, peak_on = statistics.median(peaks[False]), statistics.median(peaks[True])
            time_over = statistics.median(b / a for a, b in zip(medians[False], medians[True])) - 1
            memory_over = peak_on / peak_off - 1
            own_share = statistics.median(owns) / on if owns else None
            own = f"{statistics.median(owns) * 1e3:.2f}ms {own_share:+.1%}" if owns else "n/a"
            drift = max(medians[False]) / min(medians[False]) - 1
            noisy = drift > TIME_TARGET or max(spread(times[False]), spread(times[True])) > NOISY
            verdict = ("FAIL" if memory_over > MEMORY_TARGET else "NOISY" if noisy
                       else "PASS" if time_over <= TIME_TARGET else "FAIL")
            own_verdict = "n/a" if own_share is None else "PASS" if own_share <= TIME_TARGET else "FAIL"
            failed |= "FAIL" in (verdict, own_verdict)
            print(f"{script:<7}{device:<8}{off * 1e3:>9.2f}ms{on * 1e3:>9.2f}ms{time_over:>+8.1%}"
                  f"{peak_off / 1024:>9.0f}MB{peak_on / 1024:>9.0f}MB{memory_over:>+8.1%}{(on - off) * 1e3:>+7.2f}ms{own:>16}  {verdict} "
                  f"(off drifts {drift:.0%} between rounds; {len(times[False])} + {len(times[True])} steady steps), "
                  f"own {own_verdict}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
