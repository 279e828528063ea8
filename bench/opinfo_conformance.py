"""OpInfo conformance of the `neuron` device: the whole `op_db` on the device and on CPU.

Runs the sample inputs of `torch.testing._internal.common_methods_invocations.op_db`
(and the in-place variants) on `neuron` and on the CPU, compares results bitwise (or
within assert_close's default tolerance where a CPU kernel is not bitwise-reproducible),
inputs after the call, output devices and aliasing (torchferry/device/conformance.py),
then prints the pass rate over the samples that run on the CPU and the failures
grouped by op with reasons.

    python bench/opinfo_conformance.py --json opinfo.json            # whole database
    python bench/opinfo_conformance.py --ops add,matmul --limit 5     # a few ops

The ops are shared among `--workers` subprocesses; a worker that crashes is restarted
after the op it was running, which is reported as crashed. Progress goes to stderr.
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
from pathlib import Path
from typing import Any

TARGET = 0.99
JSON_VERSION = 1


def _select(op_db: list[Any], patterns: list[str] | None) -> list[Any]:
    if not patterns:
        return op_db
    return [op for op in op_db if any(p == op.full_name or p == op.name for p in patterns)]


def _dtypes(names: str | None) -> tuple[Any, ...]:
    import torch

    from torchferry.device.conformance import DEFAULT_DTYPES

    if not names:
        return DEFAULT_DTYPES
    return tuple(getattr(torch, n.strip()) for n in names.split(","))


def worker(args: argparse.Namespace) -> int:
    """Run the ops named in args.worker_ops, one JSON line per op to args.worker_out."""
    os.environ.setdefault("TORCHFERRY_FALLBACK", "silent")
    import warnings

    import torch

    import torchferry.device as device

    device.enable()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    from torchferry.device import conformance

    wanted = args.worker_ops.split("\n")
    skip = json.loads(Path(args.worker_skip).read_text(encoding="utf-8")) if args.worker_skip else {}
    by_name = {op.full_name: op for op in op_db}
    dtypes = _dtypes(args.dtypes)
    with open(args.worker_out, "a", encoding="utf-8") as out:

        def before(key: str) -> None:
            out.write(json.dumps({"sample": key}) + "\n")
            out.flush()

        for name in wanted:
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            t0 = time.perf_counter()
            results = conformance.run_op(by_name[name], dtypes, args.limit, skip=skip, before=before)
            out.write(json.dumps({"op": name, "seconds": time.perf_counter() - t0,
                                  "results": [r.to_json() for r in results]}) + "\n")
            out.flush()
    return 0


def _run_shard(names: list[str], args: argparse.Namespace, tmp: Path, shard: int) -> list[dict]:
    """Run `names` in a worker subprocess. After a crash the worker restarts at the op
    it was running, skipping the sample that crashed (reported as a failure)."""
    results: list[dict] = []
    remaining = list(names)
    skip: dict[str, str] = {}
    skip_path = tmp / f"shard{shard}-skip.json"
    attempt = 0
    while remaining:
        path = tmp / f"shard{shard}-{attempt}.jsonl"
        skip_path.write_text(json.dumps(skip), encoding="utf-8")
        cmd = [sys.executable, "-X", "faulthandler", __file__, "--worker-out", str(path), "--worker-ops", "\n".join(remaining),
               "--worker-skip", str(skip_path)]
        if args.limit is not None:
            cmd += ["--limit", str(args.limit)]
        if args.dtypes:
            cmd += ["--dtypes", args.dtypes]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        done, started, sample = set(), None, None
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if "start" in record:
                    started, sample = record["start"], None
                elif "sample" in record:
                    sample = record["sample"]
                else:
                    done.add(record["op"])
                    results.extend(record["results"])
        remaining = [n for n in remaining if n not in done]
        if proc.returncode != 0 and remaining:
            lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
            why = next((ln for ln in lines if "Fatal Python error" in ln), lines[-1] if lines else "")
            reason = f"crashed the process (exit {proc.returncode}): {why[:300]}"
            crashed = started if started in remaining else remaining[0]
            if sample is not None and sample.startswith(crashed + "|") and sample not in skip:
                skip[sample] = reason  # rerun the op without the sample that crashed
            else:
                results.append({"op": crashed, "variant": "op", "dtype": "", "index": -1, "status": "fail",
                                "reason": reason, "sample": ""})
                remaining.remove(crashed)
        attempt += 1
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated OpInfo names (full or base name); default: all")
    parser.add_argument("--limit", type=int, help="at most this many samples per op and dtype")
    parser.add_argument("--dtypes", help="comma-separated dtypes (default: float32,float64,int64,bool,"
                        "complex64,bfloat16, those each op supports on CPU)")
    parser.add_argument("--json", type=Path, help="write the versioned results here (atomically)")
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--worker-ops", help=argparse.SUPPRESS)
    parser.add_argument("--worker-skip", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_out:
        return worker(args)

    from torch.testing._internal.common_methods_invocations import op_db

    names = [op.full_name for op in _select(op_db, args.ops.split(",") if args.ops else None)]
    if not names:
        print(f"no OpInfo matches --ops {args.ops!r}; names are OpInfo full names such as "
              "'add', 'nn.functional.relu' or 'div.floor_rounding'.", file=sys.stderr)
        return 2
    start = time.perf_counter()
    shards = [names[i::args.workers] for i in range(args.workers)]
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(len(shards)) as pool:
        print(f"running {len(names)} OpInfos in {len(shards)} workers; progress: {tmp}/shard*.jsonl",
              file=sys.stderr)
        parts = list(pool.map(lambda i: _run_shard(shards[i], args, Path(tmp), i), range(len(shards))))
    results = [r for part in parts for r in part]
    wall = time.perf_counter() - start

    from torchferry.device.conformance import PASSING, SampleResult, summarize

    summary = summarize([SampleResult(**r) for r in results])
    failures: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r["status"] not in PASSING and r["status"] != "cpu_error":
            failures[r["op"]].append(r)
    by = summary["by_status"]
    print(f"OpInfo conformance on neuron: {len(names)} OpInfos, {summary['samples_run_on_cpu']} samples "
          f"run on CPU ({by.get('cpu_error', 0)} more are rejected by the CPU and not counted)")
    print(f"  passed {summary['passed']} = {summary['pass_rate']:.4%} (target {TARGET:.0%}): "
          f"{by.get('bitwise', 0)} bitwise, {by.get('close', 0)} within tolerance, "
          f"{by.get('undefined', 0)} with values the CPU leaves undefined (metadata agree)")
    print(f"  wall time {wall:.0f} s")
    if failures:
        print(f"failures ({sum(len(v) for v in failures.values())} samples in {len(failures)} ops):")
        for op, rows in sorted(failures.items()):
            reasons: dict[str, int] = defaultdict(int)
            for r in rows:
                reasons[f"[{r['variant']}/{r['dtype']}] {r['reason']}"] += 1
            print(f"  {op}: {len(rows)}")
            for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]:
                print(f"    {count}x {reason[:400]}")
            example = next((r for r in rows if r["sample"]), None)
            if example:
                print(f"    e.g. sample {example['index']}: {example['sample']}")
    if args.json:
        payload = {"version": JSON_VERSION, "summary": summary, "wall_seconds": wall, "ops": names,
                   "results": results}
        tmp_path = args.json.with_name(args.json.name + ".tmp")
        tmp_path.write_text(json.dumps(payload, indent=1), encoding="utf-8")
        os.replace(tmp_path, args.json)
    return 0 if summary["pass_rate"] >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
