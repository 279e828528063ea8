"""A model as one training step's trace needs it: a transformers config or a user workload spec, built on the
meta device so that no weight is ever allocated, and one micro-batch with its loss.

`ferry plan` traces it at full size (torchferry.workloads.footprint.trace); the size check of every
command that builds a named model (torchferry.workloads.footprint.fit) traces it at the command's own batch.
``check_sizes`` refuses a config whose sizes cannot describe a model, before anything is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError
from torchferry.workloads.model_source import ModelSource

SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size", "tie_word_embeddings")
# A model's sizes, by transformers' standard names (a config class's attribute_map gives its own: GPT-2's n_embd):
# each must be a whole number of at least 1 where the config gives one, or the build fails deep in a layer's
# constructor (a negative width) or builds a model without blocks (0 layers).
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
             "vocab_size", "head_dim")


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

    @classmethod
    def of_source(cls, source: ModelSource, overrides: dict[str, Any] | None = None) -> ModelSpec:
        """A named model (torchferry.workloads.model_source) as the trace builds it: a model type's default
        config, or the config file as published; ``overrides`` (the config's own keys) change its sizes."""
        if source.kind == "model-type":
            from transformers import CONFIG_MAPPING

            data = {**CONFIG_MAPPING[source.model_type]().to_dict(), "model_type": source.model_type}
            name, where = f"{source.model_type} (transformers' default config)", source.spec
        else:
            data = json.loads(Path(source.config_path).read_text())
            name = source.hub_id or data.get("_name_or_path") or f"{source.model_type} ({source.name})"
            where = source.config_path
        return cls(kind="config", name=name, source=where, config={**data, **(overrides or {})},
                   remote_code=source.needs_remote_code())

    def sizes(self) -> dict[str, Any]:
        """The config's sizes under their standard names (``SIZE_KEYS``), its text model's for a multimodal one."""
        from transformers import CONFIG_MAPPING

        config = self.config.get("text_config") if isinstance(self.config.get("text_config"), dict) else self.config
        model_type = config.get("model_type", self.config.get("model_type"))
        aliases = getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) if model_type in CONFIG_MAPPING else {}
        return {key: config[aliases.get(key, key)] for key in SIZE_KEYS
                if config.get(aliases.get(key, key)) is not None}

    def check_sizes(self) -> None:
        """Refuse a config whose sizes cannot describe a model (0 layers, a negative width), naming the value."""
        for key, value in self.sizes().items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                what = "a model has at least one layer" if key == "num_hidden_layers" else "a size is a whole number of at least 1"
                raise UsageError(f"config {self.source!r}: {key} is {value!r}; {what}. Fix the config (its published "
                                 "values), or name a model whose config is (a model type such as llama, a Hub id).")

    @property
    def layers(self) -> int | None:
        """The config's number of blocks (``num_hidden_layers``), None when it gives none (a user workload)."""
        return self.sizes().get("num_hidden_layers") if self.kind != "workload" else None


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
