"""The one worker protocol: how every command runs user code in processes of its own.

A worker is ``python -m <module> JOB.json``, started in a session of its own
(``start_new_session``) with its stderr in a log file. It speaks JSON lines on its stdout,
one event per line (``{"event": ..., "rank": R, ...}``), and reads commands as JSON lines on
its stdin. Under ``torch.distributed.run`` one launcher runs several ranks; their lines share
the pipe and are told apart by ``rank``; only rank 0 reads stdin and broadcasts each command
to the others (torchferry.harness.worker).

The parent waits for each phase with its own time limit. A phase that runs past it kills the
whole process group (a launcher is asked first, with SIGTERM, to stop its ranks, which live in
sessions of their own); a process that dies without reporting gives a ``crash`` event with its
exit status. Failures travel as ``error`` events whose ``kind`` is an error slug of
torchferry.errors (the table docs/check/errors.md documents).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torchferry.errors import StepTimeoutError

ROOT = Path(__file__).resolve().parents[2]  # the folder holding the torchferry package
T0_ENV = "TORCHFERRY_T0"  # the parent's clock (time.time()) just before the spawn: workers time from it
TERM_GRACE_S = 5.0  # how long a launcher gets to stop its ranks after SIGTERM


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: this one, torchferry importable, the spawn time for cold-start figures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env[T0_ENV] = repr(time.time())
    env.update(extra or {})
    return env


class WorkerProcess:
    """One worker process (or one launcher and its ranks), spoken to in JSON lines.

    ``on_progress(label, rank, message)`` receives the ``progress`` events as they come.
    """

    def __init__(self, label: str, argv: list[str], log: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, ranks: Iterable[int] = (0,), launcher: bool = False,
                 on_progress: Callable[[str, int, str], None] | None = None) -> None:
        self.label, self.log, self.launcher = label, log, launcher
        self.on_progress = on_progress or (lambda label, rank, msg: None)
        self.queues: dict[int, queue.Queue] = {rank: queue.Queue() for rank in ranks}
        self.finished: set[int] = set()  # ranks that reported a result or an error, or were declared dead
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env=env or worker_env(), cwd=cwd, start_new_session=True)
        self._killed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # not a protocol line (a library printing on the inherited stdout)
            rank = int(event.get("rank", 0))
            if event.get("event") == "progress":
                self.on_progress(self.label, rank, str(event.get("msg", "")))
            elif rank in self.queues:
                self.queues[rank].put(event)
        code = self.proc.wait()
        for q in self.queues.values():
            q.put({"event": "crash", "returncode": code})

    def wait(self, *wanted: str, timeout: float, rank: int = 0, phase: str = "") -> dict:
        """The next event of ``rank`` among ``wanted``, an ``error`` or a ``crash``; a timeout kills the group."""
        event = self.poll(*wanted, within=timeout, rank=rank)
        if event is None:
            self.kill()
            raise StepTimeoutError(
                f"the {self.label} worker gave no result within {timeout:g} s{f' ({phase})' if phase else ''}; its process "
                f"group was killed. Raise --timeout, or use a smaller --size/--steps; its log is {self.log}.")
        return event

    def poll(self, *wanted: str, within: float, rank: int = 0) -> dict | None:
        """Like ``wait``, but None when nothing came within ``within`` seconds (the worker is left running)."""
        deadline = time.monotonic() + within
        while True:
            try:
                event = self.queues[rank].get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if event["event"] == "crash":
                self.finished.add(rank)
                return {**event, "message": self.crash_message(event["returncode"])}
            if event["event"] in wanted or event["event"] == "error":
                if event["event"] == "error":
                    self.finished.add(rank)
                return event

    def crash_message(self, code: int | None) -> str:
        """What a dead worker left: the last lines of its log, and the signal that ended it."""
        try:
            tail = [ln for ln in self.log.read_text(errors="replace").strip().splitlines() if ln.strip()][-3:]
        except OSError:
            tail = []
        how = f" (signal {-code})" if code is not None and code < 0 else ""
        return f"{' | '.join(tail) or 'no output'}{how}; full log: {self.log}"

    def send(self, **command: Any) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def close(self, grace: float = 30.0) -> None:
        """Ask the worker to quit; kill its group when it does not within ``grace`` seconds."""
        if self.proc.poll() is None:
            try:
                self.send(cmd="quit")
                self.proc.stdin.close()
                self.proc.wait(timeout=grace)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        """Kill the whole process group (a launcher first stops its ranks, which have sessions of their own)."""
        self._killed = True
        if self.launcher and self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    @property
    def killed(self) -> bool:
        """Whether this side killed the worker (a SIGKILL it did not send is the kernel's OOM killer)."""
        return self._killed


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def run_to_end(argv: list[str], log: Path, *, timeout: float, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> int:
    """Run a one-shot helper process (no events) in its own session, output to ``log``; kill its group on timeout.

    Returns its exit status; raises StepTimeoutError when it runs past ``timeout``.
    """
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StepTimeoutError(f"{argv[-1] if argv else 'a helper'} ran past {timeout:g} s; its process group was "
                                   f"killed. Raise --timeout; its log is {log}.") from None
        finally:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
