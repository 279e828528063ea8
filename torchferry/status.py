"""Exit codes of the `ferry` command: one documented set, converted to an int only in `cli.main`."""

from enum import IntEnum, unique


@unique
class ExitStatus(IntEnum):
    # Everything ran and the result is positive (verdict `go` or `go-with-conditions`,
    # no findings at or above --fail-on, no coverage regression).
    SUCCESS = 0
    # torchferry itself failed: a bug. The message asks for a report with the traceback.
    INTERNAL_ERROR = 1
    # Bad command line, configuration or input file; nothing was measured.
    USAGE = 2
    # The run completed and the answer is negative: verdict `no-go`, scan findings at or
    # above --fail-on, or a coverage regression against the baseline.
    NEGATIVE_RESULT = 3
    # The user's workload raised (its traceback is shown apart from torchferry's).
    WORKLOAD_ERROR = 4
    # A requested device is missing or cannot be used (e.g. PrivateUse1 held by another backend).
    DEVICE_UNAVAILABLE = 5
    # A device ran out of memory while running the workload.
    OUT_OF_MEMORY = 6
    # An output (report, checkpoint, store, a file `ferry scan --fix` rewrites) could not be written.
    OUTPUT_ERROR = 7
    # A step exceeded its time limit.
    TIMEOUT = 8
    # Interrupted with Ctrl-C.
    INTERRUPTED = 130
