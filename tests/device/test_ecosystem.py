"""Unchanged transformers models on the device: Llama, GPT-2 and BERT give the CPU's
results bit for bit in float32 (same seed), greedy generation matches, bfloat16 autocast
runs. The libraries on top (Trainer, accelerate, peft, TRL, diffusers) are in tests/ecosystem/."""

import copy

import pytest
import torch
import transformers


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def _gpt2(tie_word_embeddings=False):
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                  tie_word_embeddings=tie_word_embeddings)
    return transformers.GPT2LMHeadModel(cfg)


def _bert(tie_word_embeddings=False):
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64,
                                  tie_word_embeddings=tie_word_embeddings)
    return transformers.BertForMaskedLM(cfg)


def _train(model, device, ids, steps=3, seed=0):
    """Forward, backward and AdamW steps in training mode (dropout on); returns losses, logits, params."""
    torch.manual_seed(seed)
    model = model.to(device).train()
    ids = ids.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, logits = [], None
    for _ in range(steps):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.loss.item())
        logits = out.logits.detach().cpu()
    return losses, logits, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("build", [_llama, _gpt2, _bert], ids=["llama", "gpt2", "bert"])
def test_training_is_bitwise_identical_to_cpu(neuron, build):
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 128, (2, 16))
    cpu = _train(copy.deepcopy(model), "cpu", ids)
    dev = _train(copy.deepcopy(model), "neuron", ids)
    assert cpu[0] == dev[0], "loss curves differ"
    assert torch.equal(cpu[1], dev[1]), "logits differ"
    assert all(torch.equal(a, b) for a, b in zip(cpu[2], dev[2])), "parameters differ after AdamW"


@pytest.mark.parametrize("build", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_tied_embeddings_stay_tied_and_train_bitwise_identical_to_cpu(neuron, build):
    # `model.to("neuron")` must swap parameter data in place; making new Parameters
    # would untie the input and output embeddings and change every update after the first.
    torch.manual_seed(0)
    model = build(tie_word_embeddings=True)
    moved = copy.deepcopy(model).to("neuron")
    assert moved.get_output_embeddings().weight is moved.get_input_embeddings().weight
    ids = torch.randint(0, 128, (2, 16))
    cpu = _train(copy.deepcopy(model), "cpu", ids)
    dev = _train(copy.deepcopy(model), "neuron", ids)
    assert cpu[0] == dev[0], "loss curves differ"
    assert all(torch.equal(a, b) for a, b in zip(cpu[2], dev[2])), "parameters differ after AdamW"


@pytest.mark.parametrize("build", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_greedy_generate_is_identical_to_cpu(neuron, build):
    torch.manual_seed(0)
    model = build().eval()
    prompt = torch.randint(0, 128, (1, 5))
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    cpu = model.generate(prompt, **kwargs)
    dev = copy.deepcopy(model).to("neuron").generate(prompt.to("neuron"), **kwargs)
    assert torch.equal(cpu, dev.cpu())


@pytest.mark.slow  # generate() compiles the static-cache decode step (torch.compile, Inductor): 58 s on a cold cache
def test_static_cache_generate_runs(neuron):
    torch.manual_seed(0)
    model = _llama().eval().to("neuron")
    out = model.generate(torch.randint(0, 128, (1, 5), device="neuron"), max_new_tokens=4,
                         do_sample=False, cache_implementation="static", pad_token_id=0)
    assert out.shape == (1, 9) and out.device.type == "neuron"


def test_bfloat16_autocast_training_step_runs(neuron):
    torch.manual_seed(0)
    model = _llama().to("neuron")
    ids = torch.randint(0, 128, (2, 16), device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids)
    assert out.logits.dtype == torch.bfloat16
    out.loss.backward()
    assert torch.isfinite(out.loss).item()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
