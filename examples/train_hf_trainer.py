"""A Hugging Face `Trainer` script, as users write it: a causal LM, `TrainingArguments`, `Trainer.train()`,
checkpoints every `--save-steps`, `save_model` at the end. The model is a tiny Llama built from a config
(no download); the data are random token sequences. Trainer finds the device itself (accelerate's
detection), so `ferry check -- python examples/train_hf_trainer.py` runs it unchanged on both devices.

    python examples/train_hf_trainer.py --max-steps 8 --out runs/trainer
"""

import argparse
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, rows: int, seq_len: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, vocab, (rows, seq_len), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TORCHFERRY_CHECK_OUTPUT", "runs"), "trainer"),
                        help="where to write checkpoints (default: runs/trainer; under `ferry check`, each run's own folder)")
    args = parser.parse_args()

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    training = TrainingArguments(
        output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=4, learning_rate=1e-3,
        warmup_steps=2, lr_scheduler_type="cosine", max_grad_norm=1.0, weight_decay=0.01, logging_steps=1,
        save_steps=args.save_steps, save_strategy="steps", report_to="none", seed=0, dataloader_num_workers=0,
        disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(64, 16, config.vocab_size))
    trainer.train()
    trainer.save_model(f"{args.out}/final")


if __name__ == "__main__":
    main()
