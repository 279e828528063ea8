"""The conformance tier's expected failures: one JSON file, one reason per group.

TorchNeuron commits its failure lists beside the specs that run PyTorch's tests
(tests/pytorch_tests/failing_test_methods/*.json in its source snapshot). We keep ours in
`expected_failures.json` next to this module. Each group names the tests it covers, the
kind of difference, a note and a source, so the list explains itself and the
architecture doc's list of differences is generated from it (tools/gen_conformance_doc.py).

A listed test is marked a *strict* expected failure: if it passes, the run fails, so a
fixed defect forces its entry out of the list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("expected_failures.json")
VERSION = 1

# The only reasons a test may be expected to fail on the device, and what each means.
KINDS = {
    "target behaviour": "the real device documents this behaviour (its source or docs are the source)",
    "cpu-only assumption": "the test data assumes the CPU (the same test fails on any accelerator)",
    "device defect": "a defect of the built-in device, with an open note naming where it is tracked",
}


@dataclass(frozen=True)
class Group:
    """Tests that fail on the device for one reason."""

    kind: str
    difference: str  # what differs from the CPU, in one line, as a user sees it
    note: str
    source: str
    tests: tuple[str, ...]


class ExpectationsError(ValueError):
    """expected_failures.json is malformed; the message names the entry and the fix."""


def load(path: Path = PATH) -> list[Group]:
    """The groups of `path`, validated: known kinds, every field set, each test listed once."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ExpectationsError(f"{path}: cannot read the expected failures ({error})") from error
    if data.get("version") != VERSION:
        raise ExpectationsError(f"{path}: version {data.get('version')!r}, this tier reads version {VERSION}")
    groups, seen = [], {}
    for i, raw in enumerate(data.get("expected_failures", [])):
        where = f"{path}: expected_failures[{i}]"
        missing = [k for k in ("kind", "difference", "note", "source", "tests") if not raw.get(k)]
        if missing:
            raise ExpectationsError(f"{where}: {', '.join(missing)} missing or empty")
        if raw["kind"] not in KINDS:
            raise ExpectationsError(f"{where}: kind {raw['kind']!r}; valid kinds: {', '.join(KINDS)}")
        if raw["kind"] == "device defect" and not raw["note"].startswith("open:"):
            raise ExpectationsError(f"{where}: a device defect's note starts with 'open:' and says where "
                                    f"it is tracked, got {raw['note']!r}")
        for test in raw["tests"]:
            if test in seen:
                raise ExpectationsError(f"{where}: {test} is already listed in expected_failures[{seen[test]}]")
            seen[test] = i
        groups.append(Group(raw["kind"], raw["difference"], raw["note"], raw["source"], tuple(raw["tests"])))
    return groups


def by_test(groups: list[Group]) -> dict[str, Group]:
    """Test name -> the group that expects it to fail."""
    return {test: group for group in groups for test in group.tests}
