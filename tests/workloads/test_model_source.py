"""One model source for every command (torchferry.workloads.model_source): built-in names, model types,
config files and folders, Hub ids from the user's cache (never the network), remote code refused unless trusted."""

import json
from pathlib import Path

import pytest

from torchferry.errors import UsageError
from torchferry.workloads import model_source
from torchferry.workloads.model_source import ModelSource, RemoteCodeRefused

SHA = "0123456789abcdef0123456789abcdef01234567"
TINY = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "torch_dtype": "bfloat16"}
REMOTE = {"model_type": "acme-lm", "hidden_size": 32,
          "auto_map": {"AutoConfig": "configuration_acme.AcmeConfig", "AutoModelForCausalLM": "modeling_acme.AcmeLM"}}


def hub_cache(root: Path, repo: str, config: dict, revision: str = SHA) -> Path:
    """A Hugging Face cache holding ``repo``'s config.json as huggingface_hub lays it out: a snapshot per commit and
    ``refs/main`` naming the commit."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "snapshots" / revision).mkdir(parents=True)
    (folder / "snapshots" / revision / "config.json").write_text(json.dumps(config))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    return root


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    cache = hub_cache(tmp_path / "hub", "acme/tiny-llama", TINY)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}


def test_hub_id_resolves_from_the_local_cache_offline(tmp_path, offline_cache):
    source = model_source.resolve("acme/tiny-llama", tmp_path, environ=offline_cache)
    assert (source.kind, source.hub_id, source.model_type, source.name) == ("hub", "acme/tiny-llama", "llama", "acme/tiny-llama")
    assert Path(source.config_path).parent.name == SHA
    cfg = model_source.load_config(source)
    assert (type(cfg).__name__, cfg.hidden_size, str(cfg.dtype)) == ("LlamaConfig", 32, "torch.bfloat16")


def test_hub_id_at_a_revision_reads_that_snapshot(tmp_path, offline_cache):
    source = model_source.resolve(f"acme/tiny-llama@{SHA}", tmp_path, environ=offline_cache)
    assert source.revision == SHA and Path(source.config_path).parent.name == SHA


def test_offline_miss_names_the_id_and_the_flag(tmp_path, offline_cache):
    with pytest.raises(UsageError) as err:
        model_source.resolve("acme/not-cached", tmp_path, environ=offline_cache)
    text = str(err.value)
    assert "acme/not-cached" in text and "HF_HUB_OFFLINE=1" in text and "not in the Hugging Face cache" in text


def test_remote_code_is_refused_unless_trusted(tmp_path):
    (tmp_path / "remote.json").write_text(json.dumps(REMOTE))
    source = model_source.resolve("remote.json", tmp_path)
    assert source.needs_remote_code() and not source.native
    with pytest.raises(RemoteCodeRefused, match="--trust-remote-code"):
        model_source.load_config(source)
    source.refuse_untrusted(trust_remote_code=True)  # trusted: no refusal


def test_auto_map_on_a_native_type_runs_transformers_code_unless_the_vendor_method_asks(tmp_path):
    (tmp_path / "falconish.json").write_text(json.dumps({**TINY, "auto_map": {"AutoConfig": "configuration_x.XConfig"}}))
    source = model_source.resolve("falconish.json", tmp_path)
    assert not source.needs_remote_code() and type(model_source.load_config(source)).__name__ == "LlamaConfig"
    with pytest.raises(RemoteCodeRefused, match="vendor's sweep"):
        source.refuse_untrusted(trust_remote_code=False, auto_map_needs_trust=True)


def test_every_form_resolves_and_anything_else_lists_the_forms(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(TINY))
    assert model_source.resolve("llama", tmp_path, builtins=("llama",)).kind == "builtin"
    assert model_source.resolve("mistral", tmp_path).kind == "model-type"
    folder = model_source.resolve("ckpt", tmp_path)
    assert (folder.kind, folder.name, folder.model_type) == ("config", "ckpt", "llama")
    with pytest.raises(UsageError) as err:
        model_source.resolve("not a model!", tmp_path)
    assert "a config.json path or a folder holding one" in str(err.value) and "Hub id" in str(err.value)
    with pytest.raises(UsageError, match="cannot be read: no such file"):
        model_source.resolve("missing.json", tmp_path)


def test_config_folder_rows_are_named_by_file_with_the_model_id(tmp_path):
    (tmp_path / "openai-community_gpt2_config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "mine.json").write_text(json.dumps(TINY))
    found = {s.name: s for s in model_source.folder_sources(tmp_path, str(tmp_path)).sources}
    assert set(found) == {"openai-community_gpt2", "mine"}
    assert found["openai-community_gpt2"].hub_id == "openai-community/gpt2" and found["mine"].hub_id is None


def test_source_survives_the_trip_to_a_worker(tmp_path):
    (tmp_path / "remote.json").write_text(json.dumps(REMOTE))
    source = model_source.resolve("remote.json", tmp_path)
    assert ModelSource.from_dict(json.loads(json.dumps(source.to_dict()))) == source
