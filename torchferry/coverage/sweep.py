"""Running the cases in subprocesses, ``--jobs`` architectures at a time, each row stored as it finishes.

The parent never imports torch for a case. It starts ``python -m torchferry.coverage.worker``
in a new session (so a timeout kills the whole process group, children included), gives each
mode the per-case limit, and turns what it finds into a row: the worker's own row, ``timeout``,
or for a process that died without writing one, ``oom`` (SIGKILL that we did not send: the
kernel's OOM killer) or ``error`` (the signal or exit code, with the log's last line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchferry.coverage.results import ERROR, OOM, TIMEOUT
from torchferry.coverage.store import Store

# imports and the model build get their own limit before the first mode's clock starts, so that a
# short --timeout (or a loaded machine) does not turn a slow start into a timeout row
STARTUP_S = 180.0


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def run_architecture(job: dict, workdir: Path, timeout: float, on_row: Callable[[dict], None]) -> None:
    """Run ``job['modes']`` of one architecture; each mode gets ``timeout`` seconds and always a row.

    Modes share one process while they succeed; after a timeout or a crash the mode in progress
    gets its row and the remaining modes start again in a fresh process.
    """
    modes = list(job["modes"])
    while modes:
        modes = modes[_run_process({**job, "modes": modes}, workdir, timeout, on_row):]


def _run_process(job: dict, workdir: Path, timeout: float, on_row: Callable[[dict], None]) -> int:
    """One worker process; returns how many of ``job['modes']`` got a row."""
    stem = f"{_safe(job['arch'])}__{'-'.join(job['modes'])}"
    job_path, log = workdir / f"{stem}.job.json", workdir / f"{stem}.log"
    results = {m: workdir / f"{_safe(job['arch'])}__{m}.row.json" for m in job["modes"]}
    ready = workdir / f"{stem}.ready"
    for path in [*results.values(), ready]:
        path.unlink(missing_ok=True)
    job_path.write_text(json.dumps({**job, "results": {m: str(p) for m, p in results.items()}, "ready": str(ready)}))
    done, start = 0, time.perf_counter()
    mode_start, started = start, False
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "torchferry.coverage.worker", str(job_path)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            while done < len(job["modes"]):
                mode = job["modes"][done]
                if results[mode].exists():
                    row = json.loads(results[mode].read_text())
                    # the first mode carries the process start and the model build; later ones their own time
                    row["wall_s"] = round(time.perf_counter() - start, 3) if done == 0 else row.get("case_s", 0.0)
                    if row["category"] != "pass":
                        row["log"] = str(log)
                    on_row(row)
                    done, mode_start = done + 1, time.perf_counter()
                    continue
                code = proc.poll()
                if code is not None and not results[mode].exists():
                    on_row(_died(job, mode, code, log, time.perf_counter() - mode_start))
                    return done + 1
                if not started and ready.exists():
                    started, mode_start = True, time.perf_counter()
                limit = timeout if started or done else max(timeout, STARTUP_S)
                if time.perf_counter() - mode_start > limit:
                    _kill_group(proc)
                    phase = "" if started or done else " of process start, imports and model build"
                    on_row({**_base(job, mode), "category": TIMEOUT, "wall_s": round(time.perf_counter() - mode_start, 3),
                            "reason": f"no result within {limit:g} s{phase} (process group killed)", "log": str(log)})
                    return done + 1
                time.sleep(0.1)
        finally:
            _kill_group(proc)
    return done


def _base(job: dict, mode: str) -> dict:
    return {"arch": job["arch"], "mode": mode, "device": job["target"], "ref": job["ref"], "compile": job.get("compile")}


def _died(job: dict, mode: str, code: int, log: Path, wall: float) -> dict:
    """The row of a worker that exited without writing one: the kernel's OOM kill, or a crash."""
    tail = _last_line(log)
    base = {**_base(job, mode), "wall_s": round(wall, 3), "log": str(log)}
    if code == -signal.SIGKILL:
        return {**base, "category": OOM, "reason": f"killed by SIGKILL (the kernel's OOM killer); last output: {tail}"}
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return {**base, "category": ERROR,
            "reason": f"ProcessCrash: worker died with {how} before writing a row; last output: {tail}"}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:240] if lines else "(no output)"


def sweep(jobs: list[dict], store: Store, workdir: Path, timeout: float, workers: int,
          on_row: Callable[[dict, int, int], None]) -> None:
    """Run every (architecture, mode) not yet in the store; ``on_row(row, done, total)`` after each stored row."""
    workdir.mkdir(parents=True, exist_ok=True)
    total = sum(len(j["modes"]) for j in jobs)
    todo = [{**j, "modes": [m for m in j["modes"] if not store.done(j["arch"], m)]} for j in jobs]
    todo = [j for j in todo if j["modes"]]
    done = total - sum(len(j["modes"]) for j in todo)
    lock = threading.Lock()

    def stored(row: dict) -> None:
        nonlocal done
        store.add(row)
        with lock:
            done += 1
            on_row(row, done, total)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(run_architecture, j, workdir, timeout, stored) for j in todo]:
            future.result()
