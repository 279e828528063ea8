"""The ``seq2seq`` suite: encoder-decoder language models (T5, BART, Marian, ...), forward, generate and train.

The encoder reads 16 token ids, the decoder 8 (``decoder_input_ids``); training is next-token
cross-entropy on the decoder ids, and generation is greedy from the encoder input. Speech
models in the same transformers mapping take audio features, not ids: they are skipped with
that reason.
"""

from __future__ import annotations

from typing import Any

from torchferry.coverage.suites.base import Suite, Unsupported, token_ids
from torchferry.harness.modes import Mode


class Seq2Seq(Suite):
    name = "seq2seq"
    summary = "encoder-decoder language models (AutoModelForSeq2SeqLM)"
    modes = (Mode.FORWARD, Mode.GENERATE, Mode.TRAIN)
    mapping = "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"
    auto_class = "AutoModelForSeq2SeqLM"

    def check_inputs(self, model: Any) -> None:
        super().check_inputs(model)
        if not getattr(model.config, "is_encoder_decoder", False):
            raise Unsupported("it is not an encoder-decoder model (config.is_encoder_decoder is false)")

    def generation(self, model: Any) -> dict[str, Any]:
        """A decoder start token where the default config names none (T5's is the pad token)."""
        if model.generation_config.decoder_start_token_id is not None:
            return {}
        pad = model.config.get_text_config().pad_token_id
        return {"decoder_start_token_id": pad if pad is not None else 0}

    def inputs(self, model: Any, batch: int, seq: int, seed: int, method: Any) -> dict[str, Any]:
        return {"input_ids": token_ids(model, batch, seq, seed),
                "decoder_input_ids": token_ids(model, batch, seq // 2, seed + 100)}

    def loss(self, out: Any, inputs: dict[str, Any], seed: int) -> Any:
        import torch

        logits, ids = out.logits, inputs["decoder_input_ids"]
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 ids[:, 1:].reshape(-1))


SUITE = Seq2Seq()
