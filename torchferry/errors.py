"""Typed errors: each says what failed, the bad value, the valid values and the next step.

Harness errors (`FerryError` and subclasses) are kept apart from the user's own
workload errors (`WorkloadError` wraps those and carries their traceback text).
"""

from __future__ import annotations

from torchferry.status import ExitStatus


class FerryError(Exception):
    """Base class of the errors torchferry reports as a one-paragraph message."""

    exit_status: ExitStatus = ExitStatus.INTERNAL_ERROR


class UsageError(FerryError):
    """Bad command line, configuration value or input file."""

    exit_status = ExitStatus.USAGE


class DeviceUnavailableError(FerryError):
    """A requested device does not exist here or cannot be registered."""

    exit_status = ExitStatus.DEVICE_UNAVAILABLE


class DeviceConflictError(DeviceUnavailableError):
    """PrivateUse1 is already held by another backend (the real torch-neuronx, torch_npu, ...)."""


class WorkloadError(FerryError):
    """The user's workload raised; `user_traceback` holds its own traceback text."""

    exit_status = ExitStatus.WORKLOAD_ERROR

    def __init__(self, message: str, user_traceback: str | None = None) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


class OutputError(FerryError):
    """A report, checkpoint or result store could not be written."""

    exit_status = ExitStatus.OUTPUT_ERROR


class MissingDependencyError(UsageError):
    """An optional package that the chosen workload or format needs is not installed."""


class DeviceOutOfMemoryError(FerryError):
    """A device ran out of memory while running the workload."""

    exit_status = ExitStatus.OUT_OF_MEMORY


class NonFiniteError(WorkloadError):
    """The reference device produced NaN or Inf: the workload itself is numerically broken."""


class StepTimeoutError(FerryError):
    """A worker step ran past its time limit (--timeout)."""

    exit_status = ExitStatus.TIMEOUT
