"""Stop signals: Ctrl-C (SIGINT), SIGTERM (`kill`, `timeout`, a CI job cancelled) and SIGHUP (the terminal closed)
all stop a command the same way, so that what it measured is still reported.

``stop_on_signals()`` is a context manager for the main thread. Inside it, the first of these
signals raises ``Stopped`` where the command is. ``Stopped`` is a ``KeyboardInterrupt``, so every
path that already handles Ctrl-C (kill the workers' process groups, keep the finished results,
write the report, exit 130) handles the other two as well, and no ``except Exception`` in
between mistakes it for a failure of the workload. A signal that arrives while the command is
stopping (killing its workers, writing its report) is held back: a second ``kill`` or Ctrl-C
cannot cut the report in half (SIGKILL still ends the process at once). A signal that was
ignored when the command started stays ignored (``nohup`` ignores SIGHUP; a shell's background
job ignores SIGINT). Leaving the block restores the previous handlers.

``torchferry.cli.main`` runs every subcommand inside it. A command that runs the user's own
process should start it in a session of its own (as ``torchferry.harness.protocol`` does for
workers), catch ``KeyboardInterrupt``, stop that process's group, and report ``stopped_by()`` of
the exception.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived: Ctrl-C, SIGTERM or SIGHUP; ``signal_name`` says which."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def stopped_by(exc: KeyboardInterrupt) -> str:
    """What stopped the run, in words for a report: ``SIGTERM``, ``SIGHUP`` or ``Ctrl-C (SIGINT)``."""
    name = exc.signal_name if isinstance(exc, Stopped) else "SIGINT"
    return "Ctrl-C (SIGINT)" if name == "SIGINT" else name


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn the stop signals into ``Stopped`` inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handle(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return  # already stopping: let the report be written
        stopping = True
        raise Stopped(signal.Signals(signum).name)

    previous = {}
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: a handler set outside Python
