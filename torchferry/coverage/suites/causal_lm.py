"""The ``causal-lm`` suite: every causal-LM architecture of the installed transformers, forward, generate and train.

Training is next-token cross-entropy on the input ids; under ``--method torchneuron`` it is the
model's own loss from labels at the vendor's sizes (torchferry.coverage.methods).
"""

from __future__ import annotations

from typing import Any

from torchferry.coverage.suites.base import Suite, generator, token_ids, vocab_size
from torchferry.harness.modes import Mode


class CausalLM(Suite):
    name = "causal-lm"
    summary = "decoder-only language models (AutoModelForCausalLM)"
    modes = (Mode.FORWARD, Mode.GENERATE, Mode.TRAIN)
    mapping = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
    auto_class = "AutoModelForCausalLM"

    def unknown(self, names: list[str], plugins: tuple[str, ...]) -> list[str]:
        """Any transformers model type (or a plugin's): one without a causal-LM class is skipped with that reason."""
        from torchferry.coverage.config import known_types

        known = known_types(plugins)
        return [n for n in names if n not in known]

    def choices(self, plugins: tuple[str, ...]) -> list[str]:
        from torchferry.coverage.config import known_types

        return sorted(known_types(plugins))

    def build(self, spec: str, cfg: Any, method: Any) -> Any:
        """As every transformers suite, with two families' own needs: a causal-LM class that takes the decoder
        sub-config of a composite (MusicGen), and Reformer's ``is_decoder``."""
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)] if type(cfg) in MODEL_FOR_CAUSAL_LM_MAPPING else None
        wanted = getattr(cls, "config_class", None)
        if getattr(cfg, "model_type", "") == "reformer":
            cfg.is_decoder = True  # ReformerModelWithLMHead requires it
        sub = next((c for c in vars(cfg).values() if isinstance(c, wanted)), None) if wanted and not isinstance(cfg, wanted) else None
        if sub is not None:  # the auto class does not map the sub-config: build the mapped class from it
            import torch

            return cls._from_config(sub, dtype=torch.float32, **({"attn_implementation": method.attention}
                                                                  if method.attention else {}))
        return super().build(spec, cfg, method)

    def check_inputs(self, model: Any) -> None:
        """Causal LMs are measured on token ids whatever their declared main input (as the sweep always has)."""

    def inputs(self, model: Any, batch: int, seq: int, seed: int, method: Any) -> dict[str, Any]:
        import torch

        rows = batch * codebooks(model)
        if not method.model_loss:
            return {"input_ids": token_ids(model, rows, seq, seed)}
        # the vendor's inputs: ids and labels in [0, seq), an all-ones mask
        ids = token_ids(model, batch, seq, seed, high=seq)
        labels = torch.randint(0, min(seq, vocab_size(model)), (batch, seq), generator=generator(seed + 1))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    def prompt(self, model: Any, length: int, seed: int) -> Any:
        return token_ids(model, codebooks(model), length, seed)

    def generation(self, model: Any) -> dict[str, Any]:
        """MusicGen's decoders generate through their own ``generate`` (models/musicgen ``MusicgenForCausalLM.generate``),
        which reads ``num_return_sequences`` from the generation config without the global defaults that
        ``GenerationMixin._prepare_generation_config`` fills in, and repeats its ids by None: it is given that
        default, 1 (generation/configuration_utils.py), as every other model gets it."""
        return {"num_return_sequences": 1} if codebooks(model) > 1 else {}

    def loss(self, out: Any, inputs: dict[str, Any], seed: int) -> Any:
        import torch

        if "labels" in inputs:  # the model's own loss, or the logits' sum when it computes none (as the vendor)
            return out.loss if out.loss is not None else out.logits.sum()
        logits, ids = out.logits, inputs["input_ids"]
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 ids[:, 1:].reshape(-1))


# decoders that read one row of ids per audio codebook (batch x codebooks rows)
CODEBOOK_DECODERS = ("MusicgenForCausalLM", "MusicgenMelodyForCausalLM")


def codebooks(model: Any) -> int:
    return int(model.config.num_codebooks) if type(model).__name__ in CODEBOOK_DECODERS else 1


SUITE = CausalLM()
