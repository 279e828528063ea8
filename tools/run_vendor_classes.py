"""Run the six PyTorch test classes TorchNeuron's CI lists failures for, on the CPU and on the
built-in device, and measure how many listed failures the device reproduces and how many
unlisted tests it fails (false alarms).

TorchNeuron's snapshot names six device-generic test classes (`tests/pytorch_tests/specs/aten_spec.json`)
and lists, per class, the tests that fail on real Trainium (`failing_test_methods/*.json`); every
other test of the class passes there. `tools/estimate_vendor_evidence.py` estimates the first figure
from the names alone; this runs the tests. PyTorch's test files are not in the torch wheel and not in
this repository: pass the directory that holds them (`test/` of a PyTorch checkout near the installed
torch; TorchNeuron's CI runs torch 2.10's) as `--tests`.

Each (class, device) runs in a worker process that imports the test file with PyTorch's
device-type framework limited to that device (`PYTORCH_TESTING_DEVICE_ONLY_FOR`), runs each
generated test with unittest under a per-test alarm, and appends one JSON line per test to
`<work>/<class>.<device>.jsonl`. A worker that dies (a crash, a signal) leaves what it ran on disk;
the test it was running is recorded as `crash` and the next worker resumes after it, so a rerun
with the same `--work` continues instead of starting over. The spec's skips are applied as TorchNeuron's
runner applies them (`tests/pytorch_tests/utils.py`): a key skips every test whose name contains it
(TestViewOps skips `complex` and `conj`), listed or not.

Then, per class and in all: of the listed tests that exist here and pass on the CPU, how many fail
on the device (and in how many test functions, grouped as the estimator groups them); of the
unlisted tests that pass on the CPU, which fail on the device (each is a false alarm, named with the
head of its error). A test the CPU fails, or either side skips, is left out of both figures.

    python tools/run_vendor_classes.py --tests <pytorch>/test --source <snapshot git dir>
    python tools/run_vendor_classes.py --tests <dir> --source <dir> --classes TestViewOps --json out.json

These are host runs of the rehearsal device: they say what it refuses or changes, not how Trainium
performs. Exit status 0 when the runs finished, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import traceback
import unittest
from pathlib import Path

from estimate_vendor_evidence import (  # tools/, this script's directory
    SPEC,
    function_of,
    show,
)

FORMAT_VERSION = 1  # 1: classes, totals, false_alarms
LISTS = "tests/pytorch_tests/"
DEVICES = ("cpu", "neuron")
FAILED = ("fail", "error", "crash", "timeout", "unexpected_success")


def as_device_name(test: str, device: str) -> str:
    """`test_x_cpu_float32` -> `test_x_neuron_float32`: the generated names of one test on two devices
    differ only in the last device token."""
    if device == "neuron":
        return test
    head, sep, tail = test.rpartition(f"_{device}")
    return f"{head}_neuron{tail}" if sep and (not tail or tail.startswith("_")) else test


# ------------------------------------------------------------------ the worker: one class on one device
class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that a test's `except Exception` does not swallow it."""


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Failure|_Timeout|Unsupported)\b.*:")


def _outcome(result: unittest.TestResult) -> tuple[str, str]:
    for kind, entries in (("error", result.errors), ("fail", result.failures)):
        if entries:
            lines = entries[0][1].strip().splitlines()
            errors = [line for line in lines if _ERROR_LINE.match(line)]
            last = (errors or lines or [""])[-1]
            return ("timeout" if "_Timeout:" in last else kind), last[:300]
    if result.skipped:
        return "skip", result.skipped[0][1][:300]
    if result.expectedFailures:
        return "expected_failure", ""
    if result.unexpectedSuccesses:
        return "unexpected_success", ""
    return "pass", ""


def _generated_class(module, name: str, device: str) -> type:
    suffixes = ("CPU",) if device == "cpu" else ("PRIVATEUSE1", device.upper())
    for suffix in suffixes:
        cls = getattr(module, name + suffix, None)
        if cls is not None:
            return cls
    raise SystemExit(f"error: {module.__name__} generated no {name} class for {device!r} "
                     f"(looked for {', '.join(name + s for s in suffixes)}); is the device registered?")


def work(tests_dir: Path, file: str, name: str, device: str, out: Path, skips: set[str], timeout: int) -> int:
    """Run one class's generated tests on one device, appending a JSON line per test to `out`."""
    done: set[str] = set()
    if out.exists():
        done = {json.loads(line)["test"] for line in out.read_text().splitlines() if line.strip()}
    current = out.with_suffix(".current")
    if current.exists():  # the last worker died inside this test
        crashed = current.read_text().strip()
        if crashed and crashed not in done:
            with out.open("a") as sink:
                sink.write(json.dumps({"test": crashed, "outcome": "crash", "message": "the worker died"}) + "\n")
            done.add(crashed)
        current.unlink()
    sys.path.insert(0, str(tests_dir))
    module = importlib.import_module(Path(file).stem)
    cls = _generated_class(module, name, device)

    def alarm(signum, frame):
        raise _Timeout(f"over {timeout} s")

    signal.signal(signal.SIGALRM, alarm)
    for test in unittest.TestLoader().getTestCaseNames(cls):
        if test in done:
            continue
        current.write_text(test)
        if any(key in as_device_name(test, device) for key in skips):  # a substring, as TorchNeuron's runner matches
            outcome, message = "skip", "skipped by TorchNeuron's spec"
        else:
            result = unittest.TestResult()
            signal.alarm(timeout)
            try:
                cls(test).run(result)
                outcome, message = _outcome(result)
            except _Timeout as exc:
                outcome, message = "timeout", str(exc)
            except Exception:  # noqa: BLE001 - a failure outside the test's own run is still its outcome
                outcome, message = "error", traceback.format_exc().strip().splitlines()[-1][:300]
            finally:
                signal.alarm(0)
        with out.open("a") as sink:
            sink.write(json.dumps({"test": test, "outcome": outcome, "message": message}) + "\n")
    current.unlink(missing_ok=True)
    return 0


# ------------------------------------------------------------------ the parent: run, then compare
def run_class(args: argparse.Namespace, config: dict, device: str) -> dict[str, dict]:
    """name (as on the device) -> {outcome, message}, running workers until the class is done."""
    out = args.work / f"{config['class']}.{device}.jsonl"
    skips = {test for entry in config.get("skip_tests", []) for test in entry}
    env = {**os.environ, "PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu" if device == "cpu" else "privateuse1",
           "PYTORCH_PRINT_REPRO_ON_FAILURE": "0"}
    if device != "cpu":
        env["TORCHFERRY_DEVICE"] = device
    command = [sys.executable, __file__, "--worker", "--tests", str(args.tests), "--file", config["file"],
               "--class", config["class"], "--device", device, "--out", str(out), "--timeout", str(args.timeout),
               "--skip", ",".join(sorted(skips))]
    for attempt in range(args.restarts + 1):
        code = subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL,
                              stderr=None if args.verbose else subprocess.DEVNULL).returncode
        print(f"  {config['class']} on {device}: worker {attempt + 1} exited {code}", file=sys.stderr)
        if code == 0 or not out.with_suffix(".current").exists():
            break
    results: dict[str, dict] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            entry = json.loads(line)
            results[as_device_name(entry["test"], device)] = entry
    return results


def compare(listed: set[str], cpu: dict[str, dict], device: dict[str, dict]) -> dict:
    """The class's figures: listed failures reproduced (tests and functions) and false alarms."""
    both = [t for t in device if t in cpu and cpu[t]["outcome"] == "pass"
            and device[t]["outcome"] not in ("skip", "expected_failure")]
    hits = [t for t in both if t in listed and device[t]["outcome"] in FAILED]
    listed_run = [t for t in both if t in listed]
    functions = {function_of(t) for t in listed_run}
    hit_functions = {function_of(t) for t in hits}
    false_alarms = {t: device[t]["message"] for t in both if t not in listed and device[t]["outcome"] in FAILED}
    return {"listed": len(listed), "listed_run_cpu_pass": len(listed_run), "reproduced": len(hits),
            "functions": len(functions), "functions_reproduced": len(hit_functions),
            "unlisted_run_cpu_pass": len(both) - len(listed_run), "false_alarms": false_alarms,
            "missed": sorted(set(listed_run) - set(hits)),
            "listed_not_here": sorted(listed - set(device))}


def _write_atomically(path: Path, payload: dict) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent or ".", delete=False, suffix=".tmp") as sink:
        json.dump(payload, sink, indent=1)
    os.replace(sink.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=Path, required=True, help="the directory holding PyTorch's test files")
    parser.add_argument("--source", type=Path, help="the torch-neuronx snapshot's git directory")
    parser.add_argument("--classes", default="", help="comma-separated classes of the spec (default: all six)")
    parser.add_argument("--work", type=Path, default=Path("vendor-classes"),
                        help="where each class's per-test results are kept (a rerun resumes)")
    parser.add_argument("--json", type=Path, help="also write the figures as versioned JSON")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test (default 300)")
    parser.add_argument("--restarts", type=int, default=20, help="workers restarted after crashes, per class")
    parser.add_argument("--verbose", action="store_true", help="show the workers' stderr")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--class", dest="cls", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--skip", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return work(args.tests, args.file, args.cls, args.device, args.out,
                    set(filter(None, args.skip.split(","))), args.timeout)
    if args.source is None:
        parser.error("--source is required: the torch-neuronx snapshot's git directory "
                     "(fetch github:parmoham-aws/test-repo-parmoham)")
    if not args.tests.is_dir():
        parser.error(f"--tests {args.tests}: not a directory; pass the `test/` directory of a PyTorch checkout")
    configs = [c for c in json.loads(show(args.source, SPEC))["test_configurations"]
               if any("test_list_filename" in xfail for xfail in c.get("xfail", []))]  # the six with full lists
    wanted = set(filter(None, args.classes.split(",")))
    unknown = wanted - {c["class"] for c in configs}
    if unknown:
        parser.error(f"--classes: {', '.join(sorted(unknown))} not in the spec; valid: "
                     f"{', '.join(c['class'] for c in configs)}")
    missing = sorted({c["file"] for c in configs if not wanted or c["class"] in wanted}
                     - {p.name for p in args.tests.iterdir()})
    if missing:
        parser.error(f"--tests {args.tests} lacks {', '.join(missing)}")
    args.work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict] = {}
    for config in configs:
        if wanted and config["class"] not in wanted:
            continue
        listed: set[str] = set()
        for xfail in config.get("xfail", []):
            if "test_list_filename" in xfail:
                listed |= set(json.loads(show(args.source, LISTS + xfail["test_list_filename"]))["failed_tests"])
        cpu, device = (run_class(args, config, d) for d in DEVICES)
        figures[config["class"]] = compare(listed, cpu, device)
    totals = {key: sum(f[key] for f in figures.values())
              for key in ("listed", "listed_run_cpu_pass", "reproduced", "functions", "functions_reproduced",
                          "unlisted_run_cpu_pass")}
    totals["false_alarms"] = sum(len(f["false_alarms"]) for f in figures.values())
    print(f"{'class':28s} {'listed':>6s} {'run+cpu':>7s} {'device fails':>12s} {'functions':>10s} "
          f"{'unlisted':>8s} {'false alarms':>12s}")
    for name, f in [*figures.items(), ("all", totals)]:
        share = f["reproduced"] / f["listed_run_cpu_pass"] if f["listed_run_cpu_pass"] else 0.0
        fshare = f["functions_reproduced"] / f["functions"] if f["functions"] else 0.0
        alarms = f["false_alarms"] if isinstance(f["false_alarms"], int) else len(f["false_alarms"])
        print(f"{name:28s} {f['listed']:6d} {f['listed_run_cpu_pass']:7d} {f['reproduced']:5d} ({share:5.1%}) "
              f"{f['functions_reproduced']:3d}/{f['functions']:<3d} ({fshare:5.1%}) {f['unlisted_run_cpu_pass']:8d} "
              f"{alarms:12d}")
    for name, f in figures.items():
        for test, message in f["false_alarms"].items():
            print(f"false alarm: {name}.{test}: {message}")
    if args.json:
        _write_atomically(args.json, {"format_version": FORMAT_VERSION, "classes": figures, "totals": totals})
    return 0


if __name__ == "__main__":
    sys.exit(main())
