"""What model a plan is for: a built-in Llama shape at full size, a transformers config file, or a
user workload spec (the ``ModelSpec`` the trace builds on the meta device: torchferry.workloads.footprint.model).

The built-in shapes are the public ``config.json`` values of Meta's checkpoints (hidden size,
layers, attention and key-value heads, MLP width, vocabulary, tied embeddings), so a plan for
``--size 8b`` is a plan for the model users actually fine-tune.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchferry.errors import UsageError
from torchferry.workloads import BUILTIN
from torchferry.workloads.footprint.model import ModelSpec

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
    from torchferry.workloads.protocol import PYTHON_FILE

    source = model_source.resolve(spec, Path.cwd(), python_file=PYTHON_FILE)  # -w takes what ferry check -w takes
    source.refuse_untrusted(trust_remote_code)
    return ModelSpec.of_source(source)
