"""Warm coverage workers: an architecture that follows another in the same worker gets the row a
process of its own would give, and a row that did not end normally sends the next architecture to
a fresh process (torchferry.coverage.sweep, torchferry.coverage.worker)."""

from __future__ import annotations

import json

import pytest

import dataclasses
import sys
import time

from torchferry.coverage.config import REUSE_ENV
from torchferry.coverage.job import CoverageJob
from torchferry.coverage.sweep import has_room
from torchferry.errors import ExitStatus
from torchferry.harness.protocol import WorkerProcess

# what differs between two runs of the same row: clocks and the log's place
TIMES = ("wall_s", "case_s", "phases", "log")
# -j 1 runs them in this order in one slot: gpt2 follows a pass (warm), bloom follows an error row (fresh)
ARCHS = ("llama", "gpt2", "ferry-planted", "bloom")


def _sweep(run_ferry, plugin, out, monkeypatch, reuse: str) -> list[dict]:
    monkeypatch.setenv(REUSE_ENV, reuse)
    code, _, stderr = run_ferry("coverage", *ARCHS, "--modes", "forward,train", "--plugin", plugin, "--jobs", "1",
                                "--target", "neuron", "-o", str(out))
    assert code in (0, 1), stderr
    return json.loads((out / "coverage.json").read_text())["rows"]


@pytest.fixture(scope="module")
def both(tmp_path_factory, run_ferry, plugin):
    with pytest.MonkeyPatch.context() as monkeypatch:
        out = tmp_path_factory.mktemp("reuse")
        return {"warm": _sweep(run_ferry, plugin, out / "warm", monkeypatch, "1"),
                "fresh": _sweep(run_ferry, plugin, out / "fresh", monkeypatch, "0")}


def _first_rows(rows: list[dict]) -> dict[str, dict]:
    """Each architecture's first row: the one that carries its worker's start and its build."""
    first: dict[str, dict] = {}
    for row in rows:
        first.setdefault(row["arch"], row)
    return first


@pytest.mark.slow  # two sweeps of four architectures
def test_rows_of_a_warm_worker_equal_rows_of_fresh_processes(both):
    def judged(rows):
        return {(r["arch"], r["mode"]): {k: v for k, v in r.items() if k not in TIMES} for r in rows}

    warm, fresh = judged(both["warm"]), judged(both["fresh"])
    assert warm.keys() == fresh.keys() and len(warm) == 2 * len(ARCHS)
    assert {k: v["category"] for k, v in warm.items()}[("ferry-planted", "forward")] == "error"
    for key in warm:
        assert warm[key] == fresh[key], key
    # the eager signatures are counted per architecture, as in a process of its own
    assert warm[("gpt2", "forward")]["eager_signatures"] > 0


@pytest.mark.slow
def test_a_worker_is_reused_after_a_normal_row_and_replaced_after_an_error(both):
    warm, fresh = _first_rows(both["warm"]), _first_rows(both["fresh"])
    assert warm["llama"]["phases"]["start"] > 0  # the sweep's first worker starts
    assert warm["gpt2"]["phases"]["start"] == 0  # follows llama's passing rows in the same worker
    assert warm["ferry-planted"]["phases"]["start"] == 0
    assert warm["bloom"]["phases"]["start"] > 0  # ferry-planted's error row closed the worker
    assert all(row["phases"]["start"] > 0 for row in fresh.values())
    # a warm worker skips the imports: its setup is a fraction of a fresh process's
    assert warm["gpt2"]["phases"]["setup"] < fresh["gpt2"]["phases"]["setup"]


@pytest.mark.slow
def test_every_row_says_where_its_time_went(both):
    for row in both["warm"]:
        assert row["phases"]["first_call"] is None or row["phases"]["first_call"] >= 0, row
    for row in _first_rows(both["warm"]).values():
        if row["category"] != "error":
            assert {"start", "setup", "build", "first_call"} <= row["phases"].keys(), row


def test_a_bad_reuse_value_is_a_usage_error_naming_the_valid_values(run_ferry, tmp_path, monkeypatch):
    monkeypatch.setenv(REUSE_ENV, "yes")
    code, _, stderr = run_ferry("coverage", "llama", "--modes", "forward", "-o", str(tmp_path))
    assert code == ExitStatus.USAGE and "TORCHFERRY_COVERAGE_REUSE='yes'" in stderr
    assert "1 (a warm worker" in stderr and "0 (a fresh process" in stderr
    assert not (tmp_path / "rows.jsonl").exists()  # refused before any case ran


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the worker's address space from /proc (Linux)")
def test_a_worker_holding_over_half_the_memory_limit_is_not_reused(tmp_path):
    """A worker that ran a large architecture keeps that address space: the next one would start with less
    than --memory-gb, so it gets a fresh process."""
    ready = tmp_path / "ready"
    holder = WorkerProcess("holder", [sys.executable, "-c", "import pathlib, sys, time; x = bytearray(600 * 2**20); "
                                      "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)", str(ready)], tmp_path / "holder.log")
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), (tmp_path / "holder.log").read_text()
        job = CoverageJob(arch="llama", spec="llama", modes=("forward",), ref="cpu", target="neuron", seed=0)
        assert has_room(holder, dataclasses.replace(job, memory_gib=12.0))
        assert not has_room(holder, dataclasses.replace(job, memory_gib=1.0))  # 600 MiB > half of 1 GiB
    finally:
        holder.kill()
