"""Every command names a model the same way (torchferry.workloads.model_source), and refuses a bad name up front:
before any worker starts, with the forms, the id and the flag named."""

import json
import sys
from pathlib import Path

import pytest
from ferryrun import ferry

from torchferry.status import ExitStatus

sys.path.insert(0, str(Path(__file__).parents[1] / "workloads"))
from test_model_source import REMOTE, TINY, hub_cache  # noqa: E402  (the one fake Hub cache of the tests)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path / "hub", "acme/tiny-llama", TINY)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "remote.json").write_text(json.dumps(REMOTE))
    return tmp_path


def _refused_before_any_worker(code: int, stderr: str, out: Path) -> None:
    assert code == ExitStatus.USAGE, stderr
    assert "Traceback" not in stderr and not (out / "work").exists()


@pytest.mark.parametrize("command", [["check", "-w"], ["coverage"], ["plan", "-w"]])
def test_an_offline_miss_names_the_id_and_the_flag_in_every_command(offline, command):
    code, _, stderr = ferry(*command, "acme/not-cached", "-o", str(offline / "out"))
    _refused_before_any_worker(code, stderr, offline / "out")
    assert "acme/not-cached" in stderr and "HF_HUB_OFFLINE=1" in stderr


@pytest.mark.parametrize("command", [["check", "-w"], ["plan", "-w"]])
def test_remote_code_is_refused_without_the_flag(offline, command):
    code, _, stderr = ferry(*command, "remote.json", "-o", str(offline / "out"))
    _refused_before_any_worker(code, stderr, offline / "out")
    assert "needs remote code" in stderr and "--trust-remote-code" in stderr


@pytest.mark.parametrize("command", [["check", "-w"], ["coverage"], ["plan", "-w"]])
def test_an_unsupported_form_lists_the_forms(offline, command):
    code, _, stderr = ferry(*command, "no such model!", "-o", str(offline / "out"))
    _refused_before_any_worker(code, stderr, offline / "out")
    assert "config.json" in stderr and "Hub id" in stderr and "model type" in stderr


def test_weights_without_a_checkpoint_are_refused(offline):
    code, _, stderr = ferry("check", "-w", "mistral", "--weights", "-o", str(offline / "out"))
    _refused_before_any_worker(code, stderr, offline / "out")
    assert "--weights" in stderr and "names no weights" in stderr


def test_check_and_plan_resolve_a_cached_hub_id_to_its_config(offline):
    from torchferry.plan.workload import resolve
    from torchferry.workloads.protocol import resolve_source

    source = resolve_source("acme/tiny-llama", offline)
    assert source["module"] == "torchferry.workloads.hub" and source["bind"]["model_source"]["hub_id"] == "acme/tiny-llama"
    spec = resolve(None, "acme/tiny-llama", None)
    assert (spec.kind, spec.name, spec.config["hidden_size"]) == ("config", "acme/tiny-llama", 32)


def test_the_hub_workload_builds_the_named_config_with_random_weights(offline):
    from torchferry.workloads.protocol import load_workload, resolve_source

    loaded = load_workload("acme/tiny-llama", {"batch_size": 2, "seq_len": 8, "mode": "train"},
                           resolve_source("acme/tiny-llama", offline))
    assert type(loaded.model).__name__ == "LlamaForCausalLM" and loaded.model.config.hidden_size == 32
    batch = loaded.batch("cpu", 0)
    assert batch["input_ids"].shape == (2, 8) and int(batch["input_ids"].max()) < 128 and "labels" in batch
