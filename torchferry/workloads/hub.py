"""A causal LM named by a model spec (torchferry.workloads.model_source): a transformers model type, a
config.json or a folder holding one, or a Hub id, built as the user's ``from_config`` builds it.

The model is the config as named, full size, with random weights (``--weights``: the checkpoint's,
through ``from_pretrained``: a Hub id or a checkpoint folder), in training mode with its own dropout.
The batch is random token ids below the model's vocabulary, with labels in training mode so the
model computes its own loss.
"""

from __future__ import annotations

from pathlib import Path

from torchferry.workloads.model_source import ModelSource, load_config
from torchferry.workloads.tokens import token_batch

BATCH, SEQ = 2, 32  # defaults of --batch-size and --seq-len for a named model (as the built-in workloads')


def build(model_source: dict, trust_remote_code: bool = False, weights: bool = False, batch_size: int = BATCH,
          seq_len: int = SEQ, mode: str = "training", overrides: dict | None = None) -> dict:
    """The workload protocol dict: ``model`` and ``batch(device, seed)`` (torchferry.workloads.protocol).
    ``overrides`` (config keys) shrink it to a size the user asked for (torchferry.workloads.footprint.fit)."""
    import torch
    from transformers import AutoModelForCausalLM

    source = ModelSource.from_dict(model_source)
    cfg = load_config(source, trust_remote_code=trust_remote_code)
    for key, value in (overrides or {}).items():
        setattr(cfg, key, value)
    extra = {"trust_remote_code": True} if trust_remote_code else {}
    if weights:  # a Hub id, or a checkpoint folder (protocol.resolve_source refused anything else up front)
        where = source.hub_id if source.kind == "hub" else str(Path(source.config_path).parent)
        model = AutoModelForCausalLM.from_pretrained(where, revision=source.revision, config=cfg, dtype=torch.float32,
                                                     **extra)
    else:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, **extra)
    vocab = int(model.get_input_embeddings().num_embeddings)
    return {"model": model,
            "batch": lambda device, seed: token_batch(vocab, batch_size, seq_len, device, seed, labels=mode == "training")}

