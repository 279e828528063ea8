"""`ferry coverage`: shrinking rules, row categories, store resume, baseline gate and reports."""

import json

import pytest

from torchferry.coverage import configs, results
from torchferry.report.coverage import CATEGORIES, FORMAT_VERSION, Category, Row
from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # coverage sweeps: builds and runs Hugging Face architectures, in worker processes

# A real architecture runs correctly on the built-in device when it passes, or when its only finding is
# ops the device profile predicts would run on the host (those depend on the profile, not the harness).
RUNS_CORRECTLY = (Category.PASS, Category.FAIL_FALLBACK)


def test_shrink_makes_llama_tiny_with_consistent_heads():
    from transformers import LlamaConfig

    cfg = configs.shrink(LlamaConfig())
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == (configs.LAYERS, configs.HIDDEN, configs.INTERMEDIATE)
    assert cfg.vocab_size == configs.VOCAB and cfg.bos_token_id < cfg.vocab_size and cfg.eos_token_id < cfg.vocab_size
    assert cfg.head_dim * cfg.num_attention_heads == cfg.hidden_size
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0


def test_shrink_keeps_every_layer_kind_of_a_hybrid_model():
    from transformers import CONFIG_MAPPING

    base = CONFIG_MAPPING["qwen3_next"]()
    kinds = set(base.layer_types)
    cfg = configs.shrink(base)
    assert set(cfg.layer_types) == kinds and len(cfg.layer_types) == cfg.num_hidden_layers
    assert cfg.num_experts <= configs.EXPERTS and cfg.num_experts_per_tok <= configs.EXPERTS_PER_TOKEN


def test_shrink_reaches_the_text_config_of_a_composite_model():
    from transformers import CONFIG_MAPPING

    cfg = configs.shrink(CONFIG_MAPPING["gemma3"]())
    assert cfg.text_config.num_hidden_layers <= 3 and cfg.text_config.hidden_size == configs.HIDDEN


def test_planted_device_only_failure_is_an_error_row_naming_the_op(planted_sweep):
    row = planted_sweep["rows"]["ferry-planted"]
    assert row["category"] == Category.ERROR
    assert row["reason"].startswith("NotImplementedError: planted_op has no kernel for device 'neuron'")


def test_hanging_architecture_costs_one_host_limited_row(planted_sweep):
    row = planted_sweep["rows"]["ferry-hang"]
    assert row["category"] == Category.HOST_LIMIT and "8 s" in row["reason"] and "this host's time limit" in row["reason"]
    assert planted_sweep["rows"]["llama"]["category"] in RUNS_CORRECTLY  # the sweep went on past the hang


def test_every_row_has_a_category_and_a_reason(planted_sweep):
    for row in planted_sweep["doc"]["rows"]:
        assert row["category"] in CATEGORIES and row["reason"]


def test_headline_states_numerator_denominator_and_versions(planted_sweep):
    doc = planted_sweep["doc"]
    assert doc["meta"]["format_version"] == FORMAT_VERSION and doc["meta"]["format"] == "torchferry.coverage"
    assert doc["complete"] is True and doc["failure"] is None
    runs = sum(r["category"] in (Category.PASS, Category.FAIL_FALLBACK) for r in doc["rows"])
    # the hanging architecture hit this host's time limit: no verdict, out of the denominator, counted apart
    measured = sum(r["category"] not in (Category.HOST_LIMIT, Category.SKIPPED) for r in doc["rows"])
    first = f"causal-lm on neuron (eager), forward: {runs} of {measured} architectures run to completion on the device ("
    assert doc["headline"][0].startswith(first) and doc["headline"][0].endswith("no verdict: 1 host-limited, 0 skipped")
    assert "transformers" in doc["headline"][-1] and "torch" in doc["headline"][-1]
    assert first in planted_sweep["stdout"]


def test_html_is_self_contained_with_sortable_table_and_charts(planted_sweep):
    html = (planted_sweep["out"] / "run" / "coverage.html").read_text()
    assert '<table class="rows" data-suite="causal-lm">' in html and "<script>" in html
    assert "src=" not in html and "href=" not in html  # nothing fetched
    assert 'data-plot="pass-share"' in html and 'data-plot="categories"' in html


@pytest.fixture(scope="module")
def resumed(planted_sweep, run_ferry, plugin):
    """The planted sweep run again over its own store, after a crash in the middle of a write, gated by the baseline it
    wrote: the resume test and the baseline test read this one run (each run starts an architecture-list worker)."""
    store = planted_sweep["out"] / "run" / "rows.jsonl"
    with open(store, "a") as f:
        f.write('{"kind": "row", "arch": "llama", "mo')  # a crash in the middle of a write
    return run_ferry(*_rerun_argv(planted_sweep, plugin), "--timeout", "8",
                     "--baseline", str(planted_sweep["out"] / "baseline.json"))


def _rerun_argv(planted_sweep, plugin) -> list[str]:
    """The planted sweep's architectures again, over its store."""
    return ["coverage", "llama", "bloom", "ferry-planted", "ferry-hang", "--modes", "forward", "--plugin", plugin,
            "-o", str(planted_sweep["out"] / "run"), "--target", "neuron"]


def test_resume_runs_nothing_already_stored_and_ignores_a_torn_line(resumed):
    code, stdout, stderr = resumed
    assert code == 0 and "resuming, 4 rows stored" in stderr
    assert "[" not in stderr.split("\n", 1)[1]  # no progress line: no case ran again


def test_a_torn_last_line_is_cut_off_and_the_next_row_is_not_lost(tmp_path):
    from torchferry.coverage.store import Store

    settings = {"ref": "cpu", "target": "neuron", "compile": None, "tol": None, "seed": 1, "plugins": []}
    store = Store(tmp_path / "rows.jsonl", settings)
    store.add(Row(arch="a", mode="forward", category=Category.PASS, reason="ok"))
    with open(tmp_path / "rows.jsonl", "a") as f:
        f.write('{"kind": "row", "arch": "b", "mo')  # a crash in the middle of a write
    reopened = Store(tmp_path / "rows.jsonl", settings)
    assert set(reopened.rows) == {"causal-lm/a/forward"}  # the torn row's case runs again
    reopened.add(Row(arch="c", mode="forward", category=Category.ERROR, reason="boom"))
    again = Store(tmp_path / "rows.jsonl", settings)
    assert set(again.rows) == {"causal-lm/a/forward", "causal-lm/c/forward"}
    assert again.rows["causal-lm/c/forward"].category == Category.ERROR
    assert (tmp_path / "rows.jsonl").read_text().endswith("\n")


def test_store_refuses_rows_measured_with_other_settings(planted_sweep, run_ferry):
    code, _, stderr = run_ferry("coverage", "llama", "--modes", "forward", "--seed", "7", "-o",
                            str(planted_sweep["out"] / "run"), "--target", "neuron")
    assert code == ExitStatus.USAGE and "seed: stored 1337, now 7" in stderr


def test_baseline_regression_exits_negative_and_names_the_row(planted_sweep, resumed, run_ferry, plugin):
    base = json.loads((planted_sweep["out"] / "baseline.json").read_text())
    llama, bloom = planted_sweep["rows"]["llama"]["category"], planted_sweep["rows"]["bloom"]["category"]
    assert base["rows"] == {"causal-lm/ferry-hang/forward": "host-limit", "causal-lm/ferry-planted/forward": "error",
                            "causal-lm/llama/forward": llama, "causal-lm/bloom/forward": bloom}
    assert set(base["cost_s"]) == {"causal-lm/ferry-hang", "causal-lm/ferry-planted", "causal-lm/llama", "causal-lm/bloom"}
    code, stdout, _ = resumed  # the same rows against the baseline they wrote
    assert code == ExitStatus.SUCCESS and "regressed 0" in stdout
    base["rows"]["causal-lm/ferry-planted/forward"] = "pass"
    (planted_sweep["out"] / "worse.json").write_text(json.dumps(base))
    code, stdout, _ = run_ferry(*_rerun_argv(planted_sweep, plugin), "--baseline", str(planted_sweep["out"] / "worse.json"))
    assert code == ExitStatus.NEGATIVE_RESULT
    assert "REGRESSED causal-lm/ferry-planted/forward" in stdout and "regressed 1" in stdout


def test_rerun_measures_only_rows_of_the_named_categories(planted_sweep, run_ferry, plugin):
    code, _, stderr = run_ferry("coverage", "llama", "ferry-planted", "ferry-hang", "--modes", "forward", "--plugin",
                                plugin, "--timeout", "8", "-o", str(planted_sweep["out"] / "run"), "--target", "neuron",
                                "--rerun", "error")
    progress = [line for line in stderr.splitlines() if line.startswith("[")]
    assert code == 0 and len(progress) == 1 and "ferry-planted" in progress[0] and " error " in progress[0]


def test_compare_baseline_marks_each_transition():
    rows = [Row(arch=a, mode="forward", category=Category(c), reason="") for a, c in
            (("a", "pass"), ("b", "error"), ("c", "pass"), ("d", "host-limit"), ("e", "pass"))]
    marked, out = results.compare_baseline(rows, {"rows": {"a/forward": "pass", "b/forward": "pass",
                                                           "c/forward": "fail-parity", "d/forward": "error",
                                                           "z/forward": "pass"}})
    assert [r.baseline for r in marked] == ["unchanged", "regressed", "fixed", "unchanged", "new"]
    assert [r.baseline for r in rows] == [None] * 5 and [r.case for r in marked] == [r.case for r in rows]  # new rows
    assert out["regressed"] == ["causal-lm/b/forward"] and out["missing"] == ["causal-lm/z/forward"]  # a version-1 file


def test_unknown_architecture_is_a_usage_error_with_suggestions(tmp_path, run_ferry):
    code, _, stderr = run_ferry("coverage", "lama", "-o", str(tmp_path))
    assert code == ExitStatus.USAGE and "did you mean" in stderr and "llama" in stderr


@pytest.mark.slow
def test_small_architectures_pass_all_modes(tmp_path, run_ferry):
    code, stdout, _ = run_ferry("coverage", "mistral", "qwen2", "--jobs", "2", "-o", str(tmp_path), "--target", "neuron")
    doc = json.loads((tmp_path / "coverage.json").read_text())
    assert code == 0 and len(doc["rows"]) == 6
    assert {r["mode"] for r in doc["rows"]} == {"forward", "generate", "train"}
    assert all(r["category"] in RUNS_CORRECTLY for r in doc["rows"]), [(r["arch"], r["mode"], r["reason"]) for r in doc["rows"]]
    fallback_rows = [r for r in doc["rows"] if r["category"] == Category.FAIL_FALLBACK]
    assert all(r["reason"].startswith("host fallback: aten::") for r in fallback_rows)
    # how much it matters: the share of the mode's op calls, from the row's own counts
    for r in fallback_rows:
        calls = sum(r["fallback_ops"].values())
        assert f"({calls} of {r['op_calls']} op calls, {r['fallback_share']:.1%})" in r["reason"], r["reason"]


def test_plugins_are_imported_only_in_workers(plugin, tmp_path, run_ferry, monkeypatch):
    """--plugin code never runs in the ferry process: a marker it sets stays unset here."""
    import sys

    code, _, stderr = run_ferry("coverage", "ferry-nope", "--plugin", plugin, "--modes", "forward", "-o", str(tmp_path))
    assert code == ExitStatus.USAGE and "unknown architecture 'ferry-nope'" in stderr and "ferry-planted" in stderr
    assert not any(name.startswith("ferry_coverage_plugin_") for name in sys.modules)
    from transformers import CONFIG_MAPPING

    assert "ferry-planted" not in CONFIG_MAPPING


def test_modes_accept_the_check_names_as_aliases(tmp_path, run_ferry):
    code, _, stderr = run_ferry("coverage", "llama", "--modes", "inference,bogus", "-o", str(tmp_path))
    assert code == ExitStatus.USAGE and "unknown mode 'bogus'" in stderr and "inference=forward" in stderr


@pytest.mark.slow  # ~30 s: one real architecture, then Ctrl-C
def test_ctrl_c_stops_the_sweep_within_10_s_and_reports_the_finished_rows(tmp_path, run_ferry, plugin, monkeypatch,
                                                                          ctrl_c_raises):
    import subprocess
    import time

    stamp = tmp_path / "sigint-at"
    monkeypatch.setenv("FERRY_TEST_SIGINT_STAMP", str(stamp))
    code, stdout, stderr = run_ferry("coverage", "llama", "ferry-interrupt", "mistral", "qwen2", "--modes", "forward",
                                     "--plugin", plugin, "--jobs", "1", "-o", str(tmp_path / "run"), "--target", "neuron")
    returned = time.time()
    assert code == ExitStatus.INTERRUPTED, stderr
    assert returned - float(stamp.read_text()) < 10, "the sweep took 10 s or more to stop after Ctrl-C"
    doc = json.loads((tmp_path / "run" / "coverage.json").read_text())
    assert [r["arch"] for r in doc["rows"]] == ["llama"]  # the finished row is kept, nothing after it ran
    assert doc["rows"][0]["category"] not in ("timeout", "error")
    assert doc["complete"] is False and doc["failure"]["kind"] == "interrupted"
    assert "stopped: interrupted" in stdout
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "run") not in running  # every worker's process group was killed
