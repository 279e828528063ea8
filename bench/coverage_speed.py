"""The causal-LM forward sweep with warm workers against a fresh process per architecture.

Runs `ferry coverage --modes forward --jobs J` over the same architectures twice per round, once
with `TORCHFERRY_COVERAGE_REUSE=0` (a fresh worker per architecture) and once with warm workers
(the default), alternating the order each round (ABBA), each into a folder of its own. Prints each
sweep's wall time, the ratio of the medians and where the time went (the rows' `phases`, summed),
and checks that both give every architecture the same category, since a speed-up that changes a
row is a bug. Target: the warm sweep takes at most half the fresh one's time (PASS/FAIL printed).

    python bench/coverage_speed.py [--archs 24] [--jobs 2] [--rounds 1] [--target neuron] [--first fresh]

`--archs 0` takes every causal-LM architecture of the installed transformers (196 in 5.24).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.5


def architectures(count: int) -> list[str]:
    """Every ``len/count``-th causal-LM architecture (all of them for 0), in the sweep's order."""
    from torchferry.coverage import suites

    names = sorted(suites.get("causal-lm").architectures())
    if not count or count >= len(names):
        return names
    return names[:: max(1, len(names) // count)][:count]


def sweep(archs: list[str], jobs: int, target: str, reuse: bool, out: Path) -> tuple[float, dict]:
    env = {**os.environ, "TORCHFERRY_COVERAGE_REUSE": "1" if reuse else "0"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torchferry", "coverage", *archs, "--modes", "forward", "--jobs", str(jobs),
                    "--target", target, "-o", str(out), "-q"], env=env, check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall, json.loads((out / "coverage.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--archs", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--target", default="neuron")
    parser.add_argument("--first", choices=("fresh", "warm"), default="fresh",
                        help="which sweep round 1 runs first (later rounds alternate); a second run with the other "
                             "order balances a load that changed during the first")
    args = parser.parse_args()
    archs = architectures(args.archs)
    print(f"{len(archs)} causal-LM architectures, forward, --jobs {args.jobs}, target {args.target}, "
          f"load average {os.getloadavg()[0]:.1f}")
    walls: dict[bool, list[float]] = {False: [], True: []}
    docs: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ferry-bench-coverage-") as tmp:
        for r in range(args.rounds):
            order = (False, True) if (r % 2 == 0) == (args.first == "fresh") else (True, False)
            for reuse in order:
                wall, docs[reuse] = sweep(archs, args.jobs, args.target, reuse, Path(tmp) / f"{r}-{int(reuse)}")
                walls[reuse].append(wall)
                time_by = docs[reuse]["summary"].get("time") or {}
                print(f"  round {r + 1} {'warm ' if reuse else 'fresh'}: {wall:6.1f} s; in workers: "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in time_by.items()))
    fresh, warm = statistics.median(walls[False]), statistics.median(walls[True])
    rows = {reuse: {(r["arch"], r["mode"]): r for r in doc["rows"]} for reuse, doc in docs.items()}
    differ = sorted(k for k, row in rows[False].items()
                    if row["category"] != (rows[True].get(k) or {}).get("category"))
    for key in differ:  # what each side said, so that a difference can be chased down
        for reuse in (False, True):
            row = rows[reuse].get(key) or {}
            print(f"  {key[0]} {key[1]} {'warm ' if reuse else 'fresh'}: {row.get('category')}: "
                  f"{str(row.get('reason'))[:300]}")
    ratio = warm / fresh
    ok = ratio <= TARGET and not differ
    print(f"fresh median {fresh:.1f} s, warm median {warm:.1f} s, ratio {ratio:.2f} (target <= {TARGET}); "
          f"rows whose category differs: {len(differ)} {differ[:5] if differ else ''}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
