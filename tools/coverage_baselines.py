"""Regenerate, or check, the shipped coverage baselines: every suite swept on the built-in device with the rules of
this checkout (`torchferry/coverage/baselines/<suite>/neuron.json`).

A device rule (a host fallback, a dtype rule, a kernel) that changes a row's category must change the shipped
baseline in the same commit; `--check` is the gate (tests/coverage/test_baselines.py runs it in the slow tier).

    python tools/coverage_baselines.py                   # sweep every suite, rewrite the shipped baselines
    python tools/coverage_baselines.py --check           # sweep, exit 3 naming every row whose category changed
    python tools/coverage_baselines.py --suite vision    # one suite (several: --suite vision --suite encoder)

Each suite is an ordinary `ferry coverage --suite S --jobs N` run in its own folder under `--work` (kept, so that a
stopped regeneration resumes). The vendor method's baseline (`neuron-torchneuron.json`) is not swept here: it needs
the vendor's configs and hours (docs/coverage.md, Baselines).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = ("causal-lm", "seq2seq", "encoder", "vision", "diffusers")
DEVICE = "neuron"
COMMAND = "python tools/coverage_baselines.py"


def sweep(suite: str, work: Path, jobs: int, write: bool) -> int:
    """`ferry coverage --suite SUITE` into ``work/SUITE`` (resuming what is stored), writing the shipped baseline when
    ``write``; the command's exit status."""
    from torchferry.cli import main
    from torchferry.coverage.config import baseline_path

    argv = ["coverage", "--suite", suite, "--target", DEVICE, "--jobs", str(jobs), "-o", str(work / suite)]
    if write:
        argv += ["--write-baseline", str(baseline_path(suite, DEVICE, "torchferry"))]
    return main(argv)


def changed(suite: str, work: Path) -> list[str]:
    """Every case whose category differs from the shipped baseline's, or that only one side has."""
    from torchferry.coverage.config import baseline_path
    from torchferry.coverage.results import expected_rows

    expected = expected_rows(json.loads(baseline_path(suite, DEVICE, "torchferry").read_text()))
    measured = {r["suite"] + "/" + r["arch"] + "/" + r["mode"]: r["category"]
                for r in json.loads((work / suite / "coverage.json").read_text())["rows"]}
    return ([f"{case}: shipped {expected[case]}, measured {got}" for case, got in sorted(measured.items())
             if case in expected and expected[case] != got]
            + [f"{case}: not in the shipped baseline (measured {measured[case]})" for case in sorted(set(measured) - set(expected))]
            + [f"{case}: in the shipped baseline, not measured" for case in sorted(set(expected) - set(measured))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped baselines instead of rewriting them")
    parser.add_argument("--suite", action="append", choices=SUITES, help="a suite (default: every suite)")
    parser.add_argument("--jobs", type=int, default=2, help="architectures in parallel (default: 2)")
    parser.add_argument("--work", type=Path, help="folder of the suites' stores (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ferry-baselines-") as scratch:
        work = args.work or Path(scratch)
        differences = []
        for suite in args.suite or SUITES:
            status = sweep(suite, work, args.jobs, write=not args.check)
            if status not in (0, 3):
                print(f"{COMMAND}: the {suite} sweep stopped with exit status {status}", file=sys.stderr)
                return status
            differences += changed(suite, work) if args.check else []
    if differences:
        print(f"{COMMAND} --check: {len(differences)} row(s) differ from the shipped baselines; if the change is "
              f"intended, regenerate them with `{COMMAND}` and commit the files:", file=sys.stderr)
        print("\n".join(f"  {d}" for d in differences), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
