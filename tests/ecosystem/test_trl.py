"""TRL's `SFTTrainer` with its defaults (bf16 on) on the built-in device, on a dataset and
tokenizer built in code: refused where TRL's tiled log-prob writes into a narrowed tile, trained where it does not."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import VOCAB_WORDS, tiny_llama, tiny_tokenizer

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device

TEXTS = ["the cat sat on the mat", "a dog ran far", "the dog sat and then slept", "a cat ran"]


def _sft_trainer(tmp_path, vocab_size: int):
    trl = pytest.importorskip("trl", reason="trl is in the test extras")
    datasets = pytest.importorskip("datasets", reason="datasets is in the test extras")
    config = trl.SFTConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to=[],
                           save_strategy="no", logging_steps=1, disable_tqdm=True)
    assert config.bf16 and config.device == torch.device("neuron:0")
    return trl.SFTTrainer(model=tiny_llama(vocab_size=vocab_size), args=config, processing_class=tiny_tokenizer(),
                          train_dataset=datasets.Dataset.from_dict({"text": TEXTS * 2}))


def test_sft_trainer_defaults_fail_on_neuron_where_the_log_prob_writes_mm_into_a_narrowed_tile(neuron, tmp_path):
    """TRL 1.16 scores tokens in tiles: torch.mm(..., out=mm_buf[:n, :width]) of a buffer 32768 columns wide
    (trl/kernels/chunked_logprob.py). A vocabulary that is not a multiple of 32768 makes the last tile a
    narrowed, non-contiguous view, which TorchNeuron's torch-mlir mm.out refuses (compiled_strided_writes_fail)."""
    trainer = _sft_trainer(tmp_path, vocab_size=len(VOCAB_WORDS) + 3)
    with pytest.raises(RuntimeError, match=r"aten::mm.out .*Cannot process non-contiguous tensors") as error:
        trainer.train()
    assert "writes as out= into a non-contiguous tensor of sizes" in str(error.value)


def test_sft_trainer_defaults_train_on_neuron_in_bf16_with_a_vocabulary_of_whole_tiles(neuron, tmp_path):
    # The twin: 32768 tokens make every tile the buffer's full width, so each mm.out is contiguous.
    trainer = _sft_trainer(tmp_path, vocab_size=32768)
    seen = []
    trainer.model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.append((o.device.type, o.dtype)))
    trainer.train()
    assert {p.device.type for p in trainer.model.parameters()} == {"neuron"}
    assert set(seen) == {("neuron", torch.bfloat16)}, seen
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def test_without_the_standin_trl_refuses_bf16(run_python):
    # What a user saw before the stand-in: the HF stack does not find Neuron, and TRL's bf16 default fails.
    result = run_python("""
        import torchferry.device
        torchferry.device.enable()
        import trl
        try:
            trl.SFTConfig(output_dir="unused", report_to=[])
        except ValueError as exc:
            print("refused:", exc)
    """, env={"TORCHFERRY_STANDIN": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused:" in result.stdout and "bf16" in result.stdout
