"""A corrupt line in a coverage store is named as corrupt, with its line number; --repair keeps the good rows."""

from __future__ import annotations

import pytest

from torchferry.coverage.store import Store, read
from torchferry.errors import UsageError
from torchferry.report.coverage import Category, Row

SETTINGS = {"ref": "cpu", "target": "neuron", "seed": 1, "environment": {"versions": {"torch": "2.13.0+cpu"}}}


def _store(path, archs=("a", "b", "c")):
    store = Store(path, SETTINGS)
    store.begin({"cases": [f"causal-lm/{a}/forward" for a in archs], "shard": None, "jobs": 1})
    for arch in archs:
        store.add(Row(arch=arch, mode="forward", suite="causal-lm", category=Category.PASS, reason="ok", device="neuron"))
    return path


def _corrupt(path, number, text="{\"kind\": \"row\", \"arch\": \"b\", \"mo"):
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


def test_a_corrupt_row_is_named_with_its_line_not_as_other_settings(tmp_path):
    path = _store(tmp_path / "rows.jsonl")
    _corrupt(path, 4)  # meta, run, a, b(corrupt), c
    with pytest.raises(UsageError) as raised:
        Store(path, SETTINGS)
    message = str(raised.value)
    assert "1 corrupt line(s) (line 4: JSONDecodeError" in message and "other settings" not in message
    assert "--repair" in message and "keep its 2 good rows" in message


def test_a_corrupt_settings_line_is_corrupt_too(tmp_path):
    path = _store(tmp_path / "rows.jsonl")
    _corrupt(path, 1, "not json at all")
    with pytest.raises(UsageError, match=r"line 1: JSONDecodeError") as raised:
        Store(path, SETTINGS)
    assert "other settings" not in str(raised.value)


def test_repair_keeps_the_good_rows_and_drops_only_the_corrupt_line(tmp_path):
    path = _store(tmp_path / "rows.jsonl")
    _corrupt(path, 4)
    store = Store(path, SETTINGS, repair=True)
    assert sorted(store.rows) == ["causal-lm/a/forward", "causal-lm/c/forward"]
    assert "dropped 1 corrupt line(s) (line 4" in store.repaired and "kept 2 rows" in store.repaired
    again = read(path)
    assert not again.corrupt and again.settings is not None and len(again.rows) == 2
    assert Store(path, SETTINGS).rows.keys() == store.rows.keys()  # a repaired store opens as any other


def test_repair_of_a_lost_settings_line_takes_this_runs_settings_and_says_so(tmp_path):
    path = _store(tmp_path / "rows.jsonl")
    _corrupt(path, 1, "{\"kind\": \"me")
    store = Store(path, SETTINGS, repair=True)
    assert len(store.rows) == 3 and "taken as measured with this run's settings" in store.repaired
    assert read(path).settings == SETTINGS
