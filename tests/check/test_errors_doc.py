"""The error-kind table: the slugs workers send, reports write and docs/check/errors.md lists are one set."""

import re
from pathlib import Path

from torchferry import errors

DOC = Path(__file__).parents[2] / "docs" / "check" / "errors.md"


def test_the_documented_slugs_are_exactly_the_error_kinds():
    documented = set(re.findall(r"^\| \d+ \| [A-Z_]+ \| `([a-z-]+)`", DOC.read_text(), flags=re.M))
    assert documented == set(errors.KINDS)


def test_kind_of_maps_every_failure_to_a_slug():
    assert errors.kind_of(errors.NonFiniteError("x")) == "non-finite"
    assert errors.kind_of(KeyboardInterrupt()) == "interrupted"
    assert errors.kind_of(MemoryError()) == "out-of-memory"
    assert errors.kind_of(ValueError("user code")) == "workload"
    error = errors.from_kind("non-finite", "nan at step 2", "tb")
    assert isinstance(error, errors.NonFiniteError) and error.user_traceback == "tb"


def test_a_message_gets_the_command_prefix_once():
    assert errors.message("scan", errors.UsageError("ferry scan: no such file")) == "ferry scan: no such file"
    assert errors.message("check", errors.UsageError("bad")) == "ferry check: bad"
