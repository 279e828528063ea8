"""`ferry coverage --configs DIR` finds the models a folder holds in each layout users have (config files, the
folders `save_pretrained` writes, the Hub cache), takes no other JSON file for a model config, and names what it
skipped."""

import json
import sys
from pathlib import Path

import pytest
from ferryrun import ferry

from torchferry.status import ExitStatus
from torchferry.workloads import model_source

sys.path.insert(0, str(Path(__file__).parents[1] / "workloads"))
from test_model_source import TINY, hub_cache  # noqa: E402  (the one fake Hub cache of the tests)

GENERATION = {"bos_token_id": 1, "eos_token_id": 2, "transformers_version": "5.24.0"}
TOKENIZER = {"tokenizer_class": "LlamaTokenizer", "model_max_length": 2048}


def checkpoint(folder: Path, config: dict = TINY) -> Path:
    """A folder as ``save_pretrained`` leaves it: the model's config beside generation and tokenizer files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION))
    (folder / "tokenizer_config.json").write_text(json.dumps(TOKENIZER))
    return folder


def test_a_folder_of_model_folders_gives_one_row_per_model_named_by_its_folder(tmp_path):
    checkpoint(tmp_path / "sweep" / "tiny-a")
    checkpoint(tmp_path / "sweep" / "tiny-b", {**TINY, "model_type": "mistral"})
    (tmp_path / "sweep" / "notes").mkdir()  # a folder without config.json is no model
    found = model_source.folder_sources(tmp_path / "sweep", "sweep")
    assert [(s.name, s.model_type) for s in found.sources] == [("tiny-a", "llama"), ("tiny-b", "mistral")]
    assert found.skipped == []  # only each sub-folder's config.json is read


def test_a_checkpoint_folders_generation_config_is_skipped_and_named_not_taken_for_a_model(tmp_path):
    found = model_source.folder_sources(checkpoint(tmp_path / "ckpt"), "ckpt")
    assert [s.name for s in found.sources] == ["config"]
    assert found.skipped == ["generation_config.json (no model_type: not a model config)",
                             "tokenizer_config.json (no model_type: not a model config)"]


def test_the_hub_cache_layout_gives_each_repository_its_id(tmp_path):
    other = "fedcba9876543210fedcba9876543210fedcba98"
    cache = hub_cache(tmp_path / "hub", "acme/tiny-llama", TINY)
    hub_cache(cache, "acme/tiny-mistral", {**TINY, "model_type": "mistral"}, revision=other)
    found = model_source.folder_sources(cache, "hub")
    assert [(s.name, s.hub_id, Path(s.config_path).parent.name) for s in found.sources] == [
        ("acme/tiny-llama", "acme/tiny-llama", "0123456789abcdef0123456789abcdef01234567"),
        ("acme/tiny-mistral", "acme/tiny-mistral", other)]


def test_a_name_given_twice_is_kept_apart_by_its_path(tmp_path):
    checkpoint(tmp_path / "gpt2")
    (tmp_path / "gpt2.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert [s.name for s in model_source.folder_sources(tmp_path, "x").sources] == ["gpt2", "gpt2.json"]


@pytest.fixture
def args(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return ["--target", "cpu", "-o", str(tmp_path / "out")]


def test_a_folder_without_a_model_config_is_refused_naming_what_it_skipped(tmp_path, args):
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "generation_config.json").write_text(json.dumps(GENERATION))
    (tmp_path / "only" / "broken.json").write_text("{nope")
    code, _, stderr = ferry("coverage", "--configs", "only", *args)
    assert code == ExitStatus.USAGE and "Traceback" not in stderr
    first = stderr.splitlines()[0]
    assert first.startswith("ferry coverage: --configs 'only' holds no model config: looked for *.json files with a "
                            "model_type at its top, sub-folders holding a config.json")
    assert "skipped broken.json (not JSON: " in first and "generation_config.json (no model_type" in first


def test_the_sweep_config_names_the_skipped_files(tmp_path):
    from argparse import Namespace

    from torchferry.coverage.config import CoverageConfig

    checkpoint(tmp_path / "ckpt")
    given = Namespace(archs=[], configs="ckpt", suite="causal-lm", method="torchferry", modes="forward", jobs=1,
                      timeout=60.0, memory_gb=4.0, tol=None, seed=1, ref="cpu", target="cpu", plugin=[], rerun="",
                      output=str(tmp_path / "out"), write_baseline=None, baseline=None, restart=False, compile=None)
    cfg = CoverageConfig.build(given, tmp_path)
    assert [name for name, _ in cfg.names.values()] == ["config"]
    assert cfg.skipped_configs == ("generation_config.json (no model_type: not a model config)",
                                   "tokenizer_config.json (no model_type: not a model config)")
    assert json.loads(json.dumps(cfg.to_dict()))["skipped_configs"] == list(cfg.skipped_configs)  # in coverage.json
