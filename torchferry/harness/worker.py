"""The worker side of the protocol (torchferry.harness.protocol) and the one case runner.

``Channel`` keeps the protocol stream apart from anything user code prints: the real stdout
is duplicated for JSON lines, and fd 1 is pointed at stderr (the parent's log). ``run_case``
runs one piece of user-facing work and turns whatever happens into an ``Outcome`` with an
error slug, so that check and coverage workers report failures the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.errors import OutputError, disk_full, kind_of

PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep  # torchferry's own files: not the user's frames


class Channel:
    """The protocol stream of this process (rank ``rank`` of ``world``)."""

    def __init__(self, rank: int = 0, world: int = 1) -> None:
        self.rank, self.world = rank, world
        self.stream = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, event: str, **data: Any) -> None:
        self.stream.write(json.dumps({"event": event, "rank": self.rank, **data}, default=float) + "\n")
        self.stream.flush()

    def progress(self, message: str) -> None:
        self.send("progress", msg=message)

    def commands(self) -> Iterator[dict]:
        """The parent's commands until ``quit`` or end of input; rank 0 reads them and broadcasts to the other ranks."""
        while True:
            command: dict | None = None
            if self.rank == 0:
                line = sys.stdin.readline()
                command = json.loads(line) if line.strip() else {"cmd": "quit"}
            if self.world > 1:
                import torch.distributed as dist

                box = [command]
                dist.broadcast_object_list(box, src=0)
                command = box[0]
            if command["cmd"] == "quit":
                return
            yield command


@dataclass
class Outcome:
    """What one case did: its value, or its failure as an error slug with the message and traceback."""

    value: Any = None
    kind: str | None = None  # None: it succeeded
    type: str = ""
    message: str = ""
    traceback: str = ""  # the whole traceback, torchferry's frames included (for logs)
    user_traceback: str = ""  # the user's part of it: what the parent shows as the workload's (none of ours)
    seconds: float = 0.0
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.kind is None

    def error_event(self) -> dict:
        return {"kind": self.kind, "type": self.type, "message": self.message, "traceback": self.user_traceback}

    def failure_event(self, folder: Path, who: str) -> dict:
        """``error_event``, with a full disk under ``folder`` named as the output error it is: torch.save reports
        one as "unexpected pos", and the user's next step is to free space or choose another --output."""
        event = self.error_event()
        if self.kind != OutputError.slug and self.exception is not None and disk_full(self.exception, folder):
            event.update(kind=OutputError.slug, traceback="")
        if event["kind"] == OutputError.slug:
            event["message"] = (f"the disk holding {folder} is full: the {who} could not write its files "
                                f"({event['type']}: {event['message']}). Free space there, or pass an --output DIR "
                                "on a disk with room")
        return event

    def log_traceback(self) -> None:
        """The whole traceback, torchferry's frames too, to stderr (this worker's log); a full disk that holds
        the log too must not stop the failure's event, which matters more."""
        with contextlib.suppress(OSError):
            sys.stderr.write(self.traceback)
            sys.stderr.flush()


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` without torchferry's frames: the user's code (and the libraries it called) only.

    Empty when every frame is torchferry's: torchferry raised it itself (a NaN its checks found), and
    there is no line of the user's to show."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(PACKAGE)]
    if not frames:
        return ""
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(exc), exc)))


def user_frame(tb: Any) -> traceback.FrameSummary | None:
    """The innermost frame of a traceback in the user's code: outside torch, torchferry, the standard library and
    installed packages (else the innermost outside torch and torchferry, e.g. a library's model code)."""
    return _users(traceback.extract_tb(tb))


def user_frame_of_stack(frame: Any) -> traceback.FrameSummary | None:
    """The innermost frame of a live stack (a signal handler's ``frame``) in the user's code, by ``user_frame``'s rule."""
    return _users(traceback.extract_stack(frame))


def _users(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    import sysconfig

    torch = sys.modules.get("torch")
    ours = tuple(p for p in (str(Path(torch.__file__).parent) if torch else "", PACKAGE.rstrip(os.sep)) if p)
    installed = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    mine = [f for f in frames if not f.filename.startswith(ours + ("<",))]
    own = [f for f in mine if not f.filename.startswith(installed)]
    return (own or mine or [None])[-1]


def run_case(fn: Callable[[], Any]) -> Outcome:
    """Run ``fn``; any exception (Ctrl-C included) becomes an Outcome with its slug, never escapes."""
    start = time.perf_counter()
    try:
        return Outcome(value=fn(), seconds=time.perf_counter() - start)
    except BaseException as exc:  # the parent never has to parse a traceback
        return Outcome(kind=kind_of(exc), type=type(exc).__name__, message=str(exc), exception=exc,
                       traceback=traceback.format_exc(),
                       user_traceback=getattr(exc, "user_traceback", None) or user_traceback(exc),
                       seconds=time.perf_counter() - start)
