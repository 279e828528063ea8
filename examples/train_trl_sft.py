"""A TRL `SFTTrainer` script, as users write it: a causal LM, a text dataset, `SFTConfig`, `train()`.
The model is a tiny Llama built from a config and the tokenizer a character-level one built here
(no download). `ferry check -- python examples/train_trl_sft.py` runs it unchanged on both devices, and says
no-go for trn2: TRL 1.16 scores tokens with torch.mm into a narrowed tile of a 32768-wide buffer
(trl/kernels/chunked_logprob.py), and TorchNeuron's mm.out refuses a non-contiguous out= (a vocabulary of a
multiple of 32768 tokens avoids it; docs/device/fidelity.md, compiled_strided_writes_fail).

    python examples/train_trl_sft.py --max-steps 6 --out runs/sft
"""

import argparse
import os

from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer


def char_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    alphabet = "abcdefghijklmnopqrstuvwxyz .,!?"
    vocab = {c: i + 3 for i, c in enumerate(alphabet)} | {"<pad>": 0, "<s>": 1, "</s>": 2}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TORCHFERRY_CHECK_OUTPUT", "runs"), "sft"),
                        help="where to write checkpoints (default: runs/sft; under `ferry check`, each run's own folder)")
    args = parser.parse_args()

    tokenizer = char_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config)
    texts = [f"the {w} is {a}." for w in ("cat", "dog", "sun", "sea") for a in ("red", "big", "calm", "far")]
    data = Dataset.from_dict({"text": texts * 4})
    sft = SFTConfig(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=4, learning_rate=1e-3,
                    logging_steps=1, save_steps=args.max_steps, report_to="none", seed=0, max_length=32,
                    disable_tqdm=True, dataloader_num_workers=0,
                    bf16=False)  # SFTConfig defaults to bf16, which a CPU-only reference refuses
    SFTTrainer(model=model, args=sft, train_dataset=data, processing_class=tokenizer).train()


if __name__ == "__main__":
    main()
