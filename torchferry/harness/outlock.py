"""One writer per output folder: two runs writing into one folder delete each other's files.

``output_lock(folder, command)`` holds ``<folder>/.ferry.lock`` for the life of a run: an
exclusive ``flock`` on the file, which records the owner (pid, host, command, start time). The
kernel drops the lock when its process ends, however it ends, so a lock file that is there but
not held was left by a run that died (SIGKILL, a power cut): the next run takes it over and says
so. A lock that is held refuses the second run with the folder and the owner, before it starts
anything. Worker processes do not inherit the descriptor (``subprocess`` closes it), so a
worker left behind by a killed run cannot keep the folder locked.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torchferry.errors import OutputError

LOCK_NAME = ".ferry.lock"


def _owner(text: str) -> str:
    """The owner record of a lock file, in words (``pid 123 on host, `ferry check ...`, since ...``)."""
    try:
        owner = json.loads(text)
        return f"pid {owner['pid']} on {owner['host']}, `{owner['command']}`, since {owner['since']}"
    except (ValueError, KeyError, TypeError):
        return "an owner that left no record"


@contextmanager
def output_lock(folder: Path, command: str) -> Iterator[str | None]:
    """Hold ``folder``'s lock inside the block; yields a note when a stale lock was taken over, else None.

    Raises OutputError naming the folder and the owner when another live process holds it.
    """
    path = folder / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputError(f"the lock file {str(path)!r} cannot be created ({exc.strerror or exc}); pass a writable "
                              "--output DIR.") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with os.fdopen(fd) as f:
                owner = _owner(f.read())
            raise OutputError(
                f"the output folder {str(folder)!r} is in use by another run ({owner}). Wait for it to finish, stop "
                f"it, or pass another --output DIR.") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the owner removed the file between our open and our lock: lock the file that is there now
    try:
        left = os.pread(fd, 65536, 0).decode("utf-8", "replace")
        note = f"took over the lock of {str(folder)!r} from a run that is no longer running ({_owner(left)})" if left else None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds without its record (a second run is refused, owner unnamed)
        yield note
    finally:
        try:
            os.unlink(path)  # before the unlock: a waiting opener then sees another inode and retries
        except FileNotFoundError:
            pass
        os.close(fd)
