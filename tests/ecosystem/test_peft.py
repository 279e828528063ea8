"""peft LoRA, unchanged, on the built-in device: train, `merge_and_unload`, `save_pretrained`."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import tiny_llama

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device


def test_lora_trains_merges_and_saves_on_neuron(neuron, tmp_path):
    peft = pytest.importorskip("peft", reason="peft is in the test extras")
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                               init_lora_weights=False))
    model = model.to("neuron")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 128, (2, 16), device="neuron")
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        adapted = model(input_ids=ids).logits

    model.save_pretrained(str(tmp_path / "adapter"))
    merged = model.merge_and_unload()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert {p.device.type for p in merged.parameters()} == {"neuron"}
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted, rtol=1e-4, atol=1e-4)

    # The saved adapter, on a fresh CPU base model, gives the trained model's logits.
    reloaded = peft.PeftModel.from_pretrained(tiny_llama(), str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids.cpu()).logits, adapted.cpu(), rtol=1e-4, atol=1e-4)
