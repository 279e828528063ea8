"""What model a plan is for: a built-in Llama shape at full size, a transformers config file, or a
user workload spec; built on the meta device so that no weight is ever allocated.

The built-in shapes are the public ``config.json`` values of Meta's checkpoints (hidden size,
layers, attention and key-value heads, MLP width, vocabulary, tied embeddings), so a plan for
``--size 8b`` is a plan for the model users actually fine-tune.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError
from torchferry.workloads import BUILTIN

LLAMA_SIZES: dict[str, dict[str, Any]] = {
    "1b": {"name": "Llama-3.2-1B", "source": "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json",
           "config": {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                      "tie_word_embeddings": True, "rope_theta": 500000.0, "max_position_embeddings": 131072}},
    "8b": {"name": "Llama-3-8B", "source": "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
           "config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                      "tie_word_embeddings": False, "rope_theta": 500000.0, "max_position_embeddings": 8192}},
    "70b": {"name": "Llama-3-70B", "source": "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
            "config": {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
                       "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
                       "tie_word_embeddings": False, "rope_theta": 500000.0, "max_position_embeddings": 8192}},
}

SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size", "tie_word_embeddings")


@dataclass(frozen=True)
class ModelSpec:
    """A model to plan for. ``config`` is a transformers config (with ``model_type``) unless ``kind`` is
    ``workload``, where ``spec`` names a user ``build()`` (torchferry.workloads.protocol)."""

    kind: str  # "builtin" | "config" | "workload"
    name: str
    source: str
    config: dict = field(default_factory=dict)
    spec: str | None = None
    remote_code: bool = False  # the config's repository code builds it (--trust-remote-code given)

    def shape(self) -> dict:
        """The figures printed with the plan (empty for a user workload: its model is code)."""
        return {k: self.config[k] for k in SHAPE_KEYS if k in self.config}

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "source": self.source, "shape": self.shape(), "spec": self.spec}


def resolve(size: str | None, workload: str | None, trust_remote_code: bool = False) -> ModelSpec:
    """The one model the user named, checked without building anything: ``-w`` takes what `ferry check -w` takes,
    a build() workload (a built-in name, ``file.py:build``, ``package.module:build``) or a model by name (any form of
    torchferry.workloads.model_source: a Hub id's config is fetched, nothing else); ``--size`` a built-in Llama shape."""
    if size and workload:
        raise UsageError("--size and -w both name the model; give one of them.")
    if workload and workload not in BUILTIN and ":" not in workload:
        return _from_model_source(workload, trust_remote_code)
    if workload:
        from torchferry.workloads.protocol import resolve_source

        resolve_source(workload)  # unknown spec or missing file: a UsageError with the valid forms
        return ModelSpec(kind="workload", name=workload, source=workload, spec=workload)
    size = size or "8b"
    if size not in LLAMA_SIZES:
        raise UsageError(f"unknown --size {size!r}. Valid: {', '.join(LLAMA_SIZES)}; or pass a transformers "
                         "config with -w FILE.json, or a workload with -w path/to/file.py:build.")
    entry = LLAMA_SIZES[size]
    return ModelSpec(kind="builtin", name=entry["name"], source=entry["source"], config=dict(entry["config"]))


def _from_model_source(spec: str, trust_remote_code: bool) -> ModelSpec:
    from torchferry.workloads import model_source

    source = model_source.resolve(spec, Path.cwd(), python_file="--config takes a model's config; a workload's build() "
                                                                "function is planned with -w {file}:build.")
    source.refuse_untrusted(trust_remote_code)
    if source.kind == "model-type":
        from transformers import CONFIG_MAPPING

        data = {**CONFIG_MAPPING[source.model_type]().to_dict(), "model_type": source.model_type}
        return ModelSpec(kind="config", name=f"{source.model_type} (transformers' default config)", source=spec, config=data)
    data = json.loads(Path(source.config_path).read_text())
    return ModelSpec(kind="config", name=source.hub_id or data.get("_name_or_path") or f"{source.model_type} ({source.name})",
                     source=source.config_path, config=data, remote_code=source.needs_remote_code())


def build(model: ModelSpec, options: dict, device: str = "meta") -> tuple[Any, Any]:
    """The model on ``device`` (meta for a plan: no weight is allocated; cpu for a measured run) and,
    for a user workload, its loaded protocol object (else None)."""
    import torch

    if model.kind == "workload":
        from torchferry.workloads.protocol import load_workload

        with torch.device(device):
            loaded = load_workload(model.spec, {**options, "mode": "training"})
        return loaded.model, loaded  # as the user's code builds it: the plan predicts that code
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(model.config)
    if model.remote_code:  # the repository's own config class (the user passed --trust-remote-code)
        cfg = AutoConfig.from_pretrained(model.source, trust_remote_code=True)
    else:
        cfg = AutoConfig.for_model(config.pop("model_type"), **{k: v for k, v in config.items()
                                                                 if not k.startswith("_") and k != "auto_map"})
    cfg._attn_implementation = "sdpa"
    # Training keeps no KV cache (see batch_and_loss).
    cfg.use_cache = False
    with torch.device(device):
        built = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                 **({"trust_remote_code": True} if model.remote_code else {}))
    return built, None


@cache
def _training_cache_class() -> type:
    from transformers import DynamicCache

    class TrainingCache(DynamicCache):
        """A cache that keeps nothing: every layer stays empty, ``update`` hands the step's keys and
        values straight back.

        Why: without a cache, transformers decides whether the causal mask can be left to SDPA's
        ``is_causal`` by reading the position ids' values (packed-sequence detection); on FakeTensor it
        cannot read them, so it would build a dense (batch, 1, seq, seq) mask the real run never has.
        With an empty cache the decision needs no values and is the real run's. A cache that stored
        keys would be worse: under activation checkpointing the recomputed forward appends to it
        (attention over twice the keys, every block's K and V held to the end of the backward).
        """

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):  # noqa: ANN001, ANN201
            return key_states, value_states

    return TrainingCache


def batch_and_loss(model: Any, loaded: Any, micro_batch: int, seq_len: int, device: Any):
    """One micro-batch on ``device`` and the function that turns the model's output into the loss.

    A causal LM gets token ids as labels, no attention mask (a mask of ones makes transformers build
    a dense one, which training on full sequences does not need) and an empty training cache.
    """
    import inspect

    import torch

    if loaded is not None:
        batch = loaded.batch(device, 0)
        return batch, lambda m: loaded.loss_of(loaded.forward(m, batch), batch)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (micro_batch, seq_len), device=device)
    batch = {"input_ids": ids, "labels": ids}
    accepted = inspect.signature(model.forward).parameters
    name = "cache" if "cache" in accepted else "past_key_values" if "past_key_values" in accepted else None
    if name:
        batch[name] = _training_cache_class()(config=model.config)
    return batch, lambda m: m(**batch).loss
