"""The conformance tier's pytest plumbing: expected failures, pass rates, the bench's log.

- Every test here carries the `conformance` marker (`-m "not conformance"` leaves the
  tier out of a quick local run; CI runs it).
- Tests listed in expected_failures.json are marked strict expected failures, so an
  unexpected pass fails the run and the list cannot go stale.
- The terminal summary prints the pass rates on the device beside the CPU's, over the
  tests both devices ran (same ops, dtypes and samples).
- For bench/conformance.py: TORCHFERRY_CONFORMANCE_LOG names a file that receives one
  JSON line as each test starts and one with its outcome (a crash leaves the test that
  was running as the last start); TORCHFERRY_CONFORMANCE_SHARD=i/n keeps every n-th
  test from the i-th; TORCHFERRY_CONFORMANCE_DESELECT names a file of test names
  (one a line) not to run, where the bench resumes after a crash.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import conformance_expectations as expectations
import conformance_report

HERE = Path(__file__).parent
LOG_ENV = "TORCHFERRY_CONFORMANCE_LOG"
SHARD_ENV = "TORCHFERRY_CONFORMANCE_SHARD"
DESELECT_ENV = "TORCHFERRY_CONFORMANCE_DESELECT"

_outcomes: dict[str, str] = {}  # nodeid -> passed / failed / xfailed / skipped


def _ours(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).parents


def _shard(value: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)/(\d+)", value)
    if not match or not 0 <= int(match[1]) < int(match[2]):
        raise pytest.UsageError(f"{SHARD_ENV}={value!r}: expected i/n with 0 <= i < n, e.g. 0/2")
    return int(match[1]), int(match[2])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: the conformance tier (tests/conformance); "
                            "-m 'not conformance' leaves it out")


@pytest.hookimpl(tryfirst=True)  # before `-m` selection sees the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _ours(item)]
    if not ours:
        return
    try:
        expected = expectations.by_test(expectations.load())
    except expectations.ExpectationsError as error:
        raise pytest.UsageError(str(error)) from None
    for item in ours:
        item.add_marker(pytest.mark.conformance)
        group = expected.get(item.name)
        if group is not None:
            item.add_marker(pytest.mark.xfail(reason=f"{group.kind}: {group.note}", strict=True))
    # Each CPU test next to its device twin (and in the same shard), ops in name order
    # with all their tests together, so a run cut short still compares whole ops.
    def pair(item: pytest.Item) -> str:
        return (conformance_report.pair_key(item.nodeid) or ("", "", item.nodeid))[2]

    def order(item: pytest.Item) -> tuple[str, str, str]:
        _, kind, key = conformance_report.pair_key(item.nodeid) or ("", "", item.nodeid)
        cls, _, name = key.partition("::")
        return cls, name.removeprefix(kind), kind

    ours.sort(key=order)
    keep = set(ours)
    if os.environ.get(SHARD_ENV):
        index, count = _shard(os.environ[SHARD_ENV])
        position = {key: i for i, key in enumerate(dict.fromkeys(pair(item) for item in ours))}
        keep = {item for item in ours if position[pair(item)] % count == index}
    if os.environ.get(DESELECT_ENV):
        names = set(Path(os.environ[DESELECT_ENV]).read_text(encoding="utf-8").split())
        keep = {item for item in keep if item.name not in names}
    if len(keep) < len(ours):
        config.hook.pytest_deselected(items=[item for item in ours if item not in keep])
    items[:] = [item for item in items if not _ours(item)] + [item for item in ours if item in keep]


def _log(record: dict) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")


def _our_nodeid(nodeid: str) -> bool:
    return Path(nodeid.split("::")[0]).parent.name == HERE.name


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    if _our_nodeid(nodeid):
        _log({"start": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _our_nodeid(report.nodeid):
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        _outcomes[report.nodeid] = outcome
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr or "")  # e.g. [XPASS(strict)]
        reason = " ".join(text.split())[:400] if report.failed else ""
        _log({"test": report.nodeid, "outcome": outcome, "reason": reason})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    import torch

    table = conformance_report.rates(_outcomes)
    if not table:
        return  # only the tier's own unit tests ran
    write = terminalreporter.write_line
    write("conformance tier: passed/ran on each device, over the tests both devices ran "
          "(same samples; xfailed = listed in tests/conformance/expected_failures.json)")
    for line in conformance_report.format_rates(table, torch._C._get_privateuse1_backend_name()):
        write("  " + line)
