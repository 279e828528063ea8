"""LoRA fine-tuning of a tiny causal LM with Accelerate and PEFT, gradient accumulation, saved with save_pretrained."""
import sys

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
acc = Accelerator(gradient_accumulation_steps=2)
cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [torch.randint(0, 128, (4, 16)) for _ in range(8)]
loader = torch.utils.data.DataLoader(data, batch_size=None)
model, opt, loader = acc.prepare(model, opt, loader)
model.train()
for batch in loader:
    with acc.accumulate(model):
        loss = model(input_ids=batch, labels=batch).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    acc.print(loss.item())
acc.unwrap_model(model).save_pretrained(sys.argv[1] if len(sys.argv) > 1 else "lora_out")
