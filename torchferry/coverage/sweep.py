"""Running the cases in worker processes, ``--jobs`` architectures at a time, each row stored as it finishes.

The parent never imports torch or user code for a case. It starts ``python -m
torchferry.coverage.worker`` through the harness's worker protocol (its own session, so a
timeout kills the whole process group, children included), gives the start-up and each mode
their own limit, and turns what it finds into a row: the worker's own row, ``host-limit`` for a
mode past ``--timeout`` (this host's time) or a process that died by a SIGKILL this side did not
send (the kernel's OOM killer: this host's memory), or ``error`` for any other death (the signal
or exit code, with the log's last line).

Workers are warm (torchferry.coverage.worker): a worker whose architecture's rows all ended normally
(``REUSABLE``), and whose address space is under half of ``--memory-gb``, takes the next architecture of its slot, which then skips the interpreter start and
the imports of torch and transformers. Any other row (an error, a parity failure, this host's limit,
a compile failure, a timeout, a death) closes it, and the slot's next architecture starts a fresh
process, so that what went wrong in one row cannot reach another. ``reuse=False``
(``TORCHFERRY_COVERAGE_REUSE=0``) starts a process per architecture.

``Sweep.stop()`` (the command calls it on Ctrl-C) kills the running workers at once and starts
no new one; the rows already stored stay.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchferry.coverage.job import CoverageJob
from torchferry.coverage.store import Store
from torchferry.errors import StepTimeoutError
from torchferry.harness.protocol import WorkerProcess, python_module
from torchferry.report.coverage import Category, Row

WORKER = "torchferry.coverage.worker"
# imports and the model build get their own limit before the first mode's clock starts, so that a
# short --timeout (or a loaded machine) does not turn a slow start into a timeout row
STARTUP_S = 180.0
# rows after which the worker's process is as a fresh one would be (worker._fresh_state) and takes the next job
REUSABLE = (Category.PASS, Category.FAIL_FALLBACK, Category.FAIL_RECOMPILE, Category.SKIPPED)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class Stopped(Exception):
    """The sweep was stopped (Ctrl-C): the case in progress gets no row."""


class Sweep:
    """Every (architecture, mode) not yet in the store, run ``workers`` architectures at a time."""

    def __init__(self, store: Store, workdir: Path, timeout: float, workers: int,
                 on_row: Callable[[Row, int, int], None], *, reuse: bool = True) -> None:
        self.store, self.workdir, self.timeout, self.workers, self.on_row = store, workdir, timeout, workers, on_row
        self.reuse = reuse
        self.stopping = threading.Event()
        self.live: set[WorkerProcess] = set()
        self.warm: dict[int, WorkerProcess] = {}  # pool thread -> its idle warm worker
        self.lock = threading.Lock()

    def stop(self) -> None:
        """Kill every running worker and start no new one (the finished rows are already stored)."""
        self.stopping.set()
        with self.lock:
            live = list(self.live)
        for proc in live:
            proc.kill()

    def run(self, jobs: list[CoverageJob]) -> None:
        """Run the jobs; ``on_row(row, done, total)`` after each stored row. Returns early once stopped."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        total = sum(len(j.modes) for j in jobs)
        todo = [j.with_modes([m for m in j.modes if not self.store.done(j.case(m))]) for j in jobs]
        todo = [j for j in todo if j.modes]
        self.done = total - sum(len(j.modes) for j in todo)
        self.total = total
        pool = ThreadPoolExecutor(max_workers=max(1, self.workers))
        futures = [pool.submit(self.architecture, j) for j in todo]
        try:
            for future in futures:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            with self.lock:
                idle, self.warm = list(self.warm.values()), {}
            for proc in idle:
                self._close(proc)

    def stored(self, row: Row) -> None:
        if self.stopping.is_set():
            raise Stopped()
        self.store.add(row)
        with self.lock:
            self.done += 1
            self.on_row(row, self.done, self.total)

    def architecture(self, job: CoverageJob) -> None:
        """All modes of one architecture; each mode gets ``timeout`` seconds and always a row.

        Modes share one process while they succeed; after a timeout or a crash the mode in progress
        gets its row and the remaining modes start again in a fresh process.
        """
        modes = job.modes
        try:
            while modes and not self.stopping.is_set():
                modes = modes[self.process(job.with_modes(modes)):]
        except Stopped:
            return

    def worker(self, job: CoverageJob, job_path: Path, log: Path) -> WorkerProcess:
        """This pool thread's warm worker, given the job, or a fresh process started with it."""
        with self.lock:
            proc = self.warm.pop(threading.get_ident(), None)
        if proc is not None and proc.proc.poll() is None:
            proc.label, proc.log = job.arch, log
            try:
                proc.send(cmd="job", job=str(job_path), log=str(log))
                return proc
            except OSError:  # it died while idle
                pass
        if proc is not None:
            self._close(proc)
        proc = WorkerProcess(job.arch, python_module(WORKER, str(job_path)), log)
        with self.lock:
            self.live.add(proc)
        return proc

    def _close(self, proc: WorkerProcess) -> None:
        proc.close(grace=5)
        with self.lock:
            self.live.discard(proc)

    def process(self, job: CoverageJob) -> int:
        """One architecture's modes in one worker (warm or fresh); returns how many of ``job.modes`` got a row."""
        stem = f"{_safe(job.arch)}__{'-'.join(job.modes)}"
        job_path, log = self.workdir / f"{stem}.job.json", self.workdir / f"{stem}.log"
        job_path.write_text(json.dumps(job.to_dict()))
        spawned = time.perf_counter()
        proc = self.worker(job, job_path, log)
        if self.stopping.is_set():
            proc.kill()
        done, reusable = 0, self.reuse
        try:
            started = False
            while done < len(job.modes):
                mode = job.modes[done]
                limit = self.timeout if started or done else max(self.timeout, STARTUP_S)
                try:
                    event = proc.wait("ready", "row", timeout=limit)
                except StepTimeoutError:
                    if self.stopping.is_set():
                        raise Stopped() from None
                    phase = "" if started or done else " of the worker's start, imports and model build"
                    reusable = False
                    self.stored(Row(**job.base(mode), category=Category.HOST_LIMIT, wall_s=round(limit, 3), log=str(log),
                                    reason=f"no result within {limit:g} s{phase}: this host's time limit (--timeout; "
                                           "process group killed)"))
                    return done + 1
                if event["event"] == "ready":
                    started = True
                    continue
                if event["event"] != "row":  # died without a row (or a protocol error)
                    reusable = False
                    if self.stopping.is_set() or proc.killed:
                        raise Stopped()
                    self.stored(_died(job, mode, event, log))
                    return done + 1
                row = Row.from_dict(event["row"])
                reusable = reusable and row.category in REUSABLE
                # the first mode carries the worker's start (if fresh) and the model build; later ones their own time
                wall_s = round(time.perf_counter() - spawned, 3) if done == 0 else row.case_s or 0.0
                self.stored(dataclasses.replace(row, wall_s=wall_s, log=str(log) if row.category != Category.PASS else row.log))
                done += 1
        except BaseException:
            reusable = False
            raise
        finally:
            if reusable and not self.stopping.is_set() and has_room(proc, job):
                with self.lock:
                    self.warm[threading.get_ident()] = proc
            else:
                self._close(proc)
        return done


def has_room(proc: WorkerProcess, job: CoverageJob) -> bool:
    """Whether the worker's address space is under half of the job's ``--memory-gb``.

    Freed memory stays in the process's heap, so a worker carries the largest architecture it ran so
    far. Past half of the limit it is not reused: the next architecture gets the whole limit, as a
    fresh process would, and cannot turn ``host-limit`` because of an earlier one."""
    return _address_space(proc) < job.memory_limit_gib * 2**30 / 2


def _address_space(proc: WorkerProcess) -> int:
    """The process's address space in bytes (Linux's VmSize; 0 where /proc has none)."""
    try:
        status = Path(f"/proc/{proc.proc.pid}/status").read_text()
    except OSError:
        return 0
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmSize:")), "0")
    return int(kib) * 1024


def _died(job: CoverageJob, mode: str, event: dict, log: Path) -> Row:
    """The row of a worker that exited without sending one: the kernel's OOM kill, or a crash."""
    code, tail = event.get("returncode"), _last_line(log)
    base = {**job.base(mode), "log": str(log)}
    if code == -signal.SIGKILL:
        return Row(**base, category=Category.HOST_LIMIT,
                   reason=f"killed by SIGKILL (the kernel's OOM killer: this host's memory); last output: {tail}")
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return Row(**base, category=Category.ERROR,
               reason=f"ProcessCrash: worker died with {how} before sending a row; last output: {tail}")


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:240] if lines else "(no output)"
