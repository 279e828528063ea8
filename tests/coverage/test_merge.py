"""`ferry coverage merge`: shards' stores combined into one report equal to an unsharded run, and
stores that cannot be combined refused with the difference named."""

import json

import pytest

from torchferry.coverage.store import Store
from torchferry.report.coverage import Category, Row
from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # coverage sweeps: builds and runs Hugging Face architectures, in worker processes

# what differs between two runs of the same case by nature: clocks and the worker's own folder
VOLATILE = {"wall_s", "case_s", "phases", "log", "baseline"}  # clocks, places and marks
SETTINGS = {"ref": "cpu", "target": "neuron", "compile": None, "tol": None, "seed": 1, "plugins": [], "method": "torchferry",
            "environment": {"versions": {"torch": "2.13.0+cpu"}, "knobs": {}}}
CASES = ["causal-lm/a/forward", "causal-lm/b/forward", "causal-lm/c/forward"]


def _store(folder, shard, assigned, settings=SETTINGS, cases=CASES):
    store = Store(folder / "rows.jsonl", settings)
    store.begin({"cases": cases, "shard": shard, "assigned": assigned, "jobs": 1})
    for case in assigned:
        suite, arch, mode = case.split("/")
        store.add(Row(arch=arch, mode=mode, suite=suite, category=Category.PASS, reason="ok", device="neuron"))
    return folder


def test_shards_merged_give_the_rows_of_one_unsharded_run(planted_sweep, run_ferry, tmp_path):
    """Two shards of the planted sweep's real architectures, merged, against that unsharded sweep's rows for them
    (its plugin and hang limit do not touch these two; leaving them out keeps the test to two worker starts)."""
    argv = ["coverage", "llama", "bloom", "--modes", "forward", "--jobs", "2", "--target", "neuron"]
    for k in (1, 2):
        code, stdout, _ = run_ferry(*argv, "--shard", f"{k}/2", "-o", str(tmp_path / f"shard-{k}"))
        assert code == 0 and f"shard {k}/2: 1 architectures" in stdout
    code, stdout, _ = run_ferry("coverage", "merge", str(tmp_path / "shard-1"), str(tmp_path / "shard-2" / "rows.jsonl"),
                                "-o", str(tmp_path / "merged"))
    assert code == 0 and "merged shards 1, 2 of 2 from 2 stores" in stdout
    merged = json.loads((tmp_path / "merged" / "coverage.json").read_text())
    whole = [r for r in planted_sweep["doc"]["rows"] if r["arch"] in ("llama", "bloom")]
    strip = [{k: v for k, v in r.items() if k not in VOLATILE} for r in merged["rows"]]
    assert strip == [{k: v for k, v in r.items() if k not in VOLATILE} for r in whole]
    assert merged["complete"] is True and merged["shards"]["missing"] == [] and len(strip) == 2


def test_merge_refuses_stores_from_another_environment_naming_the_difference(tmp_path, run_ferry):
    other = {**SETTINGS, "environment": {"versions": {"torch": "2.12.0+cpu"}, "knobs": {}}}
    one = _store(tmp_path / "s1", "1/2", CASES[:2])
    two = _store(tmp_path / "s2", "2/2", CASES[2:], settings=other)
    code, _, stderr = run_ferry("coverage", "merge", str(one), str(two), "-o", str(tmp_path / "m"))
    assert code == ExitStatus.USAGE
    assert "environment.versions.torch" in stderr and "'2.13.0+cpu'" in stderr and "'2.12.0+cpu'" in stderr
    assert not (tmp_path / "m" / "coverage.json").exists()


@pytest.mark.parametrize("change, named", [
    ({"settings": {**SETTINGS, "seed": 7}}, "seed"),
    ({"cases": CASES + ["causal-lm/d/forward"]}, "selection: 1 cases only in"),
])
def test_merge_refuses_stores_with_another_config(tmp_path, run_ferry, change, named):
    one = _store(tmp_path / "s1", "1/2", CASES[:2])
    two = _store(tmp_path / "s2", "2/2", CASES[2:], **change)
    code, _, stderr = run_ferry("coverage", "merge", str(one), str(two), "-o", str(tmp_path / "m"))
    assert code == ExitStatus.USAGE and named in stderr


def test_merge_refuses_overlapping_stores_and_names_missing_shards(tmp_path, run_ferry):
    one = _store(tmp_path / "s1", "1/3", CASES[:2])
    code, _, stderr = run_ferry("coverage", "merge", str(one), str(_store(tmp_path / "s2", "2/3", CASES[1:2])),
                                "-o", str(tmp_path / "m"))
    assert code == ExitStatus.USAGE and "causal-lm/b/forward belongs to two stores" in stderr
    code, stdout, _ = run_ferry("coverage", "merge", str(one), "-o", str(tmp_path / "m"))
    doc = json.loads((tmp_path / "m" / "coverage.json").read_text())
    assert code == 0 and doc["complete"] is False and doc["shards"]["missing"] == [2, 3]
    assert "MISSING shards 2, 3" in stdout and len(doc["rows"]) == 2


def test_merge_of_no_store_is_a_usage_error(tmp_path, run_ferry):
    code, _, stderr = run_ferry("coverage", "merge", str(tmp_path / "nowhere"), "-o", str(tmp_path / "m"))
    assert code == ExitStatus.USAGE and "is not a coverage store" in stderr
