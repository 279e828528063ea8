"""The ``encoder`` suite: BERT-like encoders with a masked-LM head (``bert``) and a sequence-classification head (``bert:seq-cls``).

Both run forward and train (cross-entropy against random labels: every vocabulary position for
the masked LM, one of the config's labels per sequence for classification). The architectures
are transformers' masked-LM mapping, plus ``TYPE:seq-cls`` for each of those types that the
sequence-classification mapping also has.
"""

from __future__ import annotations

from typing import Any

from torchferry.coverage.suites.base import Suite
from torchferry.harness.modes import Mode

CLASSIFICATION = ":seq-cls"


class Encoder(Suite):
    name = "encoder"
    summary = "BERT-like encoders: masked LM (AutoModelForMaskedLM) and TYPE:seq-cls (AutoModelForSequenceClassification)"
    modes = (Mode.FORWARD, Mode.TRAIN)
    mapping = "MODEL_FOR_MASKED_LM_MAPPING_NAMES"
    auto_class = "AutoModelForMaskedLM"

    @property
    def source(self) -> str:
        return f"transformers {self.mapping} (+ MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as TYPE{CLASSIFICATION})"

    def architectures(self) -> dict[str, str]:
        from transformers.models.auto import modeling_auto

        masked = super().architectures()
        classify = modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
        return {**masked, **{f"{t}{CLASSIFICATION}": classify[t] for t in masked if t in classify}}

    def variants(self, spec: str, method: Any) -> list[tuple[str, Any]]:
        return super().variants(spec.removesuffix(CLASSIFICATION), method)

    def build(self, spec: str, cfg: Any, method: Any) -> Any:
        import torch
        import transformers

        if not spec.endswith(CLASSIFICATION):
            return super().build(spec, cfg, method)
        if getattr(cfg, "pad_token_id", None) is None:
            cfg.pad_token_id = 0  # classification pools at the last non-pad token of some models
        return transformers.AutoModelForSequenceClassification.from_config(cfg, dtype=torch.float32)


SUITE = Encoder()
