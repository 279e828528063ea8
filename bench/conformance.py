"""Conformance of the `neuron` device: PyTorch's OpInfo and ModuleInfo databases, device vs CPU.

Runs the conformance tier (tests/conformance: our device-generic tests over the torch
wheel's `op_db` and `module_db`, instantiated for the CPU and the PrivateUse1 backend)
over every OpInfo and ModuleInfo, then prints the pass rates on the device beside the
CPU's over the tests both devices ran (same ops, dtypes and samples), per test kind,
and the failures that tests/conformance/expected_failures.json does not list.

    nice -n 10 python bench/conformance.py --json conformance.json   # the full run
    python bench/conformance.py --mode ci                            # the CI subset
    python bench/conformance.py -k "add or matmul"                   # a pytest -k filter

The tests are shared among `--workers` pytest processes. A worker that crashes (a
segfault) is restarted without the tests it finished and the one that crashed, which is
reported as crashed. Exit status 0 when nothing fails beyond the listed expected
failures, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIER = ROOT / "tests" / "conformance"
sys.path.insert(0, str(TIER))

import conformance_harness  # noqa: E402
import conformance_report  # noqa: E402

JSON_VERSION = 1


def _run_shard(shard: int, args: argparse.Namespace, tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Run shard `shard` of the tier until every test in it has an outcome:
    ({nodeid: outcome}, {nodeid: reason of a failure})."""
    outcomes: dict[str, str] = {}
    reasons: dict[str, str] = {}
    deselect = tmp / f"shard{shard}.deselect"
    deselect.write_text("", encoding="utf-8")
    attempt = 0
    while True:  # one attempt per crash; each one deselects the test that crashed
        log = tmp / f"shard{shard}-{attempt}.jsonl"
        env = {**os.environ, conformance_harness.MODE_ENV: args.mode, "TORCHFERRY_FALLBACK": "silent",
               "TORCHFERRY_CONFORMANCE_LOG": str(log),
               "TORCHFERRY_CONFORMANCE_SHARD": f"{shard}/{args.workers}",
               "TORCHFERRY_CONFORMANCE_DESELECT": str(deselect)}
        cmd = [sys.executable, "-X", "faulthandler", "-m", "pytest", str(TIER), "-q", "-p", "no:cacheprovider",
               "-W", "ignore", "--tb=no", "-o", "addopts=", f"--timeout={args.timeout}"]
        if args.k:
            cmd += ["-k", args.k]
        if args.samples is not None:
            env[conformance_harness.SAMPLES_ENV] = str(args.samples)
        if args.dtypes:
            env[conformance_harness.DTYPES_ENV] = args.dtypes
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        running = None
        if log.exists():
            for line in log.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if "start" in record:
                    running = record["start"]
                else:
                    outcomes[record["test"]] = record["outcome"]
                    if record["reason"]:
                        reasons[record["test"]] = record["reason"]
        if proc.returncode in (0, 1, 5) or running is None or running in outcomes:
            if proc.returncode not in (0, 1, 5):
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
                raise SystemExit(f"shard {shard}: pytest exited {proc.returncode} outside a test: "
                                 + " | ".join(tail))
            return outcomes, reasons
        lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        why = next((ln for ln in lines if "Fatal Python error" in ln), lines[-1] if lines else "")
        outcomes[running] = "crashed"
        reasons[running] = f"crashed the process (exit {proc.returncode}): {why[:300]}"
        done = {nodeid.split("::")[-1] for nodeid in outcomes}
        deselect.write_text("\n".join(sorted(done)), encoding="utf-8")
        print(f"shard {shard}: {running} crashed; restarting without it", file=sys.stderr)
        attempt += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=sorted(conformance_harness.MODES), default="full",
                        help="full: every OpInfo and ModuleInfo (default); ci: the CI subset")
    parser.add_argument("-k", help="pytest -k expression selecting tests (e.g. 'add or matmul')")
    parser.add_argument("--samples", type=int, help="at most this many samples (module inputs) per op and "
                        "dtype; default: all in a full run, the CI subset's count in a ci run")
    parser.add_argument("--dtypes", help="comma-separated dtypes, e.g. float32,int64 (default: the tier's)")
    parser.add_argument("--workers", type=int, default=2, help="pytest processes (default 2)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test before it fails (default 600)")
    parser.add_argument("--json", type=Path, help="write the versioned results here (atomically)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least 1")

    import torchferry.device

    torchferry.device.enable()  # the device's name labels the report
    import torch

    name = torch._C._get_privateuse1_backend_name()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.workers) as pool:
        print(f"conformance ({args.mode}): {args.workers} pytest workers; progress in {tmp}/shard*.jsonl",
              file=sys.stderr)
        parts = list(pool.map(lambda i: _run_shard(i, args, Path(tmp)), range(args.workers)))
    wall = time.perf_counter() - start
    outcomes = {k: v for part in parts for k, v in part[0].items()}
    reasons = {k: v for part in parts for k, v in part[1].items()}
    if not outcomes:
        print("no test ran: check -k", file=sys.stderr)
        return 2
    table = conformance_report.rates(outcomes)
    narrowed = "".join(f", {k} {v}" for k, v in (("samples", args.samples), ("dtypes", args.dtypes)) if v)
    print(f"conformance of {name} ({args.mode} run{narrowed}, {len(outcomes)} tests, wall {wall:.0f} s): passed/ran "
          f"over the tests both devices ran; xfailed = listed in tests/conformance/expected_failures.json")
    for line in conformance_report.format_rates(table, name):
        print("  " + line)
    unexpected: dict[str, list[str]] = defaultdict(list)
    for nodeid, outcome in sorted(outcomes.items()):
        if outcome in ("failed", "crashed"):
            device, kind, _ = conformance_report.pair_key(nodeid) or ("", nodeid.split("::")[-1], "")
            unexpected[f"{kind} on {name if device == 'device' else device or 'the tier'}"].append(
                f"{nodeid.split('::')[-1]}: {reasons.get(nodeid, '')}")
    for group, rows in sorted(unexpected.items()):
        print(f"unexpected failures, {group}: {len(rows)}")
        for row in rows:
            print(f"  {row[:300]}")
    if args.json:
        payload = {"version": JSON_VERSION, "mode": args.mode, "samples": args.samples, "dtypes": args.dtypes,
                   "device": name, "wall_seconds": wall,
                   "rates": table, "outcomes": outcomes, "reasons": reasons}
        tmp_path = args.json.with_name(args.json.name + ".tmp")
        tmp_path.write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp_path, args.json)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
