"""Causal-LM pre-training with Accelerate in bfloat16, with a scripted loss helper and early stopping."""

import math

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoModelForCausalLM, get_cosine_schedule_with_warmup


@torch.jit.script
def shifted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


def main(packed="packed.pt", steps=10_000, lr=3e-4, patience=500):
    accelerator = Accelerator(mixed_precision="bf16")
    config = AutoConfig.from_pretrained("gpt2")
    model = AutoModelForCausalLM.from_config(config)
    data = torch.load(packed, weights_only=True)["blocks"]
    loader = DataLoader(data, batch_size=8, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    scheduler = get_cosine_schedule_with_warmup(optimizer, 500, steps)
    scaler = torch.amp.GradScaler("cuda")
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    best, since_best = math.inf, 0
    for step, batch in enumerate(loader):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch).logits
            loss = shifted_cross_entropy(logits.float(), batch)
        accelerator.backward(scaler.scale(loss))
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad()
        if loss.item() < best:
            best, since_best = loss.item(), 0
        else:
            since_best += 1
        if since_best > patience or step == steps:
            break
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained("checkpoint", save_function=accelerator.save)
    accelerator.print(f"best loss {best:.4f}")


if __name__ == "__main__":
    main()
