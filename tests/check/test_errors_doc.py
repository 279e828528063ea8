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


def test_every_test_the_hostile_input_table_names_exists():
    """A renamed or deleted test leaves the table pointing at nothing; each `tests/...py::name` must be defined."""
    root = DOC.parents[2]
    missing = []
    for cell in re.findall(r"^\|[^\n]*\| (`tests/[^\n]*?) \|$", DOC.read_text(), flags=re.M):
        path = None
        for ref in re.findall(r"`([^`]+)`", cell):
            file, _, name = ref.partition("::")
            path = root / file if file else path  # `::name` continues the file named before it
            if not path.is_file() or (name and f"def {name}(" not in path.read_text()):
                missing.append(ref)
    assert not missing
