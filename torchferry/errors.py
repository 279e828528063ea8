"""Typed errors: each says what failed, the bad value, the valid values and the next step.

Harness errors (`FerryError` and subclasses) are kept apart from the user's own
workload errors (`WorkloadError` wraps those and carries their traceback text).
Every class has a ``slug``: the one error-kind vocabulary, shared by workers (which send
the slug), reports (``failure.kind``) and docs/check/errors.md (one row per slug).
"""

from __future__ import annotations

import errno
import os

from torchferry.status import ExitStatus

FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
LOW_SPACE_BYTES = 1 << 20  # a write that failed with less than this left on its filesystem failed for space


class FerryError(Exception):
    """Base class of the errors torchferry reports as a one-paragraph message."""

    exit_status: ExitStatus = ExitStatus.INTERNAL_ERROR
    slug = "internal"


class UsageError(FerryError):
    """Bad command line, configuration value or input file."""

    exit_status = ExitStatus.USAGE
    slug = "usage"


class DeviceUnavailableError(FerryError):
    """A requested device does not exist here or cannot be registered."""

    exit_status = ExitStatus.DEVICE_UNAVAILABLE
    slug = "device-unavailable"


class DeviceConflictError(DeviceUnavailableError):
    """PrivateUse1 is already held by another backend (the real torch-neuronx, torch_npu, ...)."""


class WorkloadError(FerryError):
    """The user's workload raised; `user_traceback` holds its own traceback text."""

    exit_status = ExitStatus.WORKLOAD_ERROR
    slug = "workload"

    def __init__(self, message: str, user_traceback: str | None = None) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


class OutputError(FerryError):
    """A report, checkpoint or result store could not be written."""

    exit_status = ExitStatus.OUTPUT_ERROR
    slug = "output"


class MissingDependencyError(UsageError):
    """An optional package that the chosen workload or format needs is not installed."""

    slug = "missing-dependency"


class DeviceOutOfMemoryError(FerryError):
    """A device ran out of memory while running the workload."""

    exit_status = ExitStatus.OUT_OF_MEMORY
    slug = "out-of-memory"


class NonFiniteError(WorkloadError):
    """The reference device produced NaN or Inf: the workload itself is numerically broken."""

    slug = "non-finite"


class StepTimeoutError(FerryError):
    """A worker step ran past its time limit (--timeout)."""

    exit_status = ExitStatus.TIMEOUT
    slug = "timeout"


class InterruptedRun(FerryError):
    """The run was stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP (torchferry.harness.signals); what finished is kept."""

    exit_status = ExitStatus.INTERRUPTED
    slug = "interrupted"


# slug -> class: the error-kind table (docs/check/errors.md lists exactly these slugs)
KINDS: dict[str, type[FerryError]] = {cls.slug: cls for cls in (
    FerryError, UsageError, MissingDependencyError, DeviceUnavailableError, WorkloadError, NonFiniteError,
    DeviceOutOfMemoryError, OutputError, StepTimeoutError, InterruptedRun)}


def disk_full(exc: BaseException, folder: str | os.PathLike | None = None) -> bool:
    """Whether ``exc`` comes from a full disk (or quota): ENOSPC/EDQUOT anywhere in its chain, or, given the
    ``folder`` it was writing to, any failure while that filesystem has less than 1 MiB left (torch.save
    reports a full disk as ``unexpected pos ...``, without an errno)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_DISK_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    if folder is None:
        return False
    try:
        stat = os.statvfs(folder)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < LOW_SPACE_BYTES


def kind_of(exc: BaseException) -> str:
    """The slug of any exception: torchferry's own, an out-of-memory, Ctrl-C, a full disk, else the user's ``workload``."""
    import sys

    if isinstance(exc, FerryError):
        return exc.slug
    if isinstance(exc, KeyboardInterrupt):
        return InterruptedRun.slug
    oom = getattr(sys.modules.get("torch"), "OutOfMemoryError", MemoryError)
    if isinstance(exc, (MemoryError, oom)):
        return DeviceOutOfMemoryError.slug
    if disk_full(exc):
        return OutputError.slug
    return WorkloadError.slug


def from_kind(kind: str, message: str, user_traceback: str | None = None) -> FerryError:
    """The typed error for a slug received from a worker (unknown slugs are the user's workload's)."""
    cls = KINDS.get(kind, WorkloadError)
    return cls(message, user_traceback) if issubclass(cls, WorkloadError) else cls(message)


def message(command: str | None, exc: BaseException) -> str:
    """``ferry COMMAND: message``, prefixed once (a message that already carries the prefix keeps one)."""
    prefix = f"ferry {command}: " if command else "ferry: "
    text = str(exc) or type(exc).__name__
    for doubled in (prefix, "ferry: "):
        if text.startswith(doubled):
            text = text[len(doubled):]
    return prefix + text
