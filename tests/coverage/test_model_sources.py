"""`ferry coverage` over named models: a folder of configs (--configs), Hub ids from the cache, the vendor's method
as its code runs it, and rows this host cannot hold filed as host-limited, outside the pass rate."""

import json
import sys
from pathlib import Path

import pytest
from caserun import RUNS_CORRECTLY, run_case
from ferryrun import ferry

from torchferry.coverage import results
from torchferry.report.coverage import Category, Row

sys.path.insert(0, str(Path(__file__).parents[1] / "workloads"))
from test_model_source import REMOTE, TINY, hub_cache  # noqa: E402  (the one fake Hub cache of the tests)

pytestmark = pytest.mark.slow  # coverage cases that build and run architectures

DROPOUT_BF16 = {**TINY, "attention_dropout": 0.1, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def folder_sweep(tmp_path_factory):
    """One forward sweep of a config folder (a named config, a remote-code one) and a cached Hub id, offline."""
    root = tmp_path_factory.mktemp("named")
    configs = root / "configs"
    configs.mkdir()
    (configs / "acme_tiny-llama_config.json").write_text(json.dumps(TINY))
    (configs / "acme_remote_config.json").write_text(json.dumps(REMOTE))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(hub_cache(root / "hub", "acme/hub-llama", TINY)))
        mp.setenv("HF_HUB_OFFLINE", "1")
        code, stdout, stderr = ferry("coverage", "acme/hub-llama", "--configs", str(configs), "--modes", "forward",
                                     "--jobs", "2", "--target", "neuron", "-o", str(root / "out"))
    doc = json.loads((root / "out" / "coverage.json").read_text())
    return {"code": code, "stderr": stderr, "doc": doc, "rows": {r["arch"]: r for r in doc["rows"]}}


def test_config_folder_rows_are_named_by_the_config_with_the_model_id(folder_sweep):
    rows = folder_sweep["rows"]
    assert folder_sweep["code"] == 0, folder_sweep["stderr"]
    assert set(rows) == {"acme_tiny-llama", "acme_remote", "acme/hub-llama"}
    assert rows["acme_tiny-llama"]["model_id"] == "acme/tiny-llama"
    assert rows["acme_tiny-llama"]["category"] in RUNS_CORRECTLY, rows["acme_tiny-llama"]["reason"]


def test_a_hub_id_runs_from_the_cache(folder_sweep):
    row = folder_sweep["rows"]["acme/hub-llama"]
    assert row["model_id"] == "acme/hub-llama" and row["category"] in RUNS_CORRECTLY, row["reason"]


def test_a_remote_code_config_is_a_skip_naming_the_flag(folder_sweep):
    row = folder_sweep["rows"]["acme_remote"]
    assert row["category"] == Category.SKIPPED and "--trust-remote-code" in row["reason"]
    assert "acme_remote" in folder_sweep["doc"]["summary"]["suites"]["causal-lm"]["modes"]["forward"]["excluded"]


def test_a_row_over_this_hosts_memory_is_host_limited_and_not_counted(tmp_path):
    from torchferry.coverage.job import CoverageJob
    from torchferry.coverage.worker import Case, row_of
    from torchferry.harness.worker import run_case as run

    (tmp_path / "big.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))  # 2 layers: ~0.5B
    job = CoverageJob(arch="big", spec=str(tmp_path / "big.json"), suite="causal-lm", method="torchneuron",
                      modes=("train",), target="neuron", ref="cpu", seed=1, threads=1, memory_gib=1)
    case = Case(job)
    built = run(lambda: (case.setup(), case.build()))
    row = row_of(built, {**case.row, "mode": "train"})
    assert row.category == Category.HOST_LIMIT
    # the size rule follows the dtype: bfloat16 parameters at 2 bytes, 6 copies, over 1 GiB
    assert "in bfloat16" in row.reason and "--memory-gb 1" in row.reason and "this host's limit" in row.reason
    summary = results.summarise([row, Row(arch="ok", mode="train", category=Category.PASS, reason="")], ["train"])
    mode = summary["suites"]["causal-lm"]["modes"]["train"]
    assert (mode["pass"], mode["measured"], mode["host_limited"]) == (1, 1, ["big"])
    headline = results.headline(summary, "neuron", None, {})
    assert headline[0] == ("causal-lm on neuron (eager), train: 1 of 1 architectures run to completion on the device "
                           "(1 work as they are; 0 only with predicted host fallbacks), 0 fail on the device; no verdict: "
                           "1 host-limited, 0 skipped")


def test_the_vendor_method_keeps_the_configs_dtype_dropout_and_attention(tmp_path):
    (tmp_path / "bf16.json").write_text(json.dumps(DROPOUT_BF16))
    cases = []
    rows = run_case("causal-lm", "bf16", ["train"], method="torchneuron", spec=str(tmp_path / "bf16.json"), case_out=cases)
    row, model = rows["train"], cases[0].model
    assert row["dtype"] == "bfloat16" and row["variant"] == "vendor" and row["category"] in RUNS_CORRECTLY, row["reason"]
    assert next(model.parameters()).dtype.__str__() == "torch.bfloat16" and model.config.attention_dropout == 0.1
    assert model.config._attn_implementation == "sdpa" and model.config.num_hidden_layers == 2
