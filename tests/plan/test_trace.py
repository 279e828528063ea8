"""The tracer at full size: Llama-3-8B full fine-tuning, AdamW, bf16 parameters / fp32 master
weights, FSDP2 over 64 ranks, gives a per-rank peak within 15% of the hand calculation below."""

from __future__ import annotations

import pytest

from torchferry.plan.layout import make_layout
from torchferry.workloads.footprint.trace import trace_step
from torchferry.plan.workload import resolve

MiB = 2**20


def hand_calculation_llama3_8b(ranks: int = 64, seq: int = 4096) -> dict[str, int]:
    """Peak bytes per rank at the start of the backward (every activation saved, the loss's gradients
    live), from the model's shape alone. Llama-3-8B: hidden h = 4096, 32 layers, 32 heads of 128,
    8 kv heads (kv width 1024), MLP width I = 14336, vocabulary V = 128256, untied embeddings."""
    h, kv, inter, vocab, layers = 4096, 1024, 14336, 128256, 32
    # Parameters: per layer q, o = h*h; k, v = h*kv; gate, up, down = h*I; two norms = 2h
    #   16,777,216*2 + 4,194,304*2 + 58,720,256*3 + 8,192 = 218,112,000
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h
    # embeddings and LM head V*h each = 525,336,576; final norm h
    root = 2 * vocab * h + h
    params = layers * per_layer + root  # 8,030,261,248
    shard = params // ranks  # 125,472,832 per rank
    figures = {
        # FSDP2 keeps each rank's 1/64 shard in fp32 (the master weights): 125,472,832 * 4 B = 501.9 MB
        "sharded fp32 weights": shard * 4,
        # AdamW: exp_avg and exp_avg_sq in fp32 per shard element: 125,472,832 * 8 B = 1,003.8 MB
        "AdamW state": shard * 8,
        # gradients: none yet at the start of the backward (zero_grad(set_to_none=True) before)
        # The root group (embeddings, LM head, final norm) stays unsharded in bf16 after the forward:
        #   1,050,677,248 * 2 B = 2,101.4 MB
        "root unsharded bf16": root * 2,
        # FSDP2 all-gathers the last block's bf16 weights when the backward starts: 218,112,000 * 2 B = 436.2 MB
        "prefetched block bf16": per_layer * 2,
    }
    # Saved activations per layer, bf16 (2 B) unless noted, s = 4096 tokens:
    #   input norm: fp32 upcast s*h*4 (64 MiB) + bf16 cast s*h*2 (32 MiB) + its output s*h*2 (32 MiB) = 128 MiB
    #   attention: q s*h*2 (32) + k, v s*kv*2 (8 + 8) + output s*h*2 (32) + logsumexp s*32*4 (0.5) = 80.5 MiB
    #   o_proj input (the output made contiguous): 32 MiB
    #   post-attention norm: as the input norm, 128 MiB
    #   MLP: gate out, silu out, up out, their product, each s*I*2 (112 MiB): 448 MiB
    #   (rotary: cos and sin do not require grad, so q*cos saves only cos, shared by all layers)
    #   = 816.5 MiB per layer, * 32 layers = 26,128 MiB = 27,397.2 MB
    per_layer_saved = (seq * h * 4 + seq * h * 2 + seq * h * 2) * 2 + (seq * h * 2 + 2 * seq * kv * 2 + seq * h * 2
                                                                        + seq * 32 * 4) + seq * h * 2 + 4 * seq * inter * 2
    figures["activations"] = layers * per_layer_saved
    # The loss in fp32: the saved log_softmax output, the gradient nll_loss gives it and the one
    # log_softmax's backward gives the logits, each s*V*4 = 2,101.3 MB: 6,304.0 MB
    figures["loss gradients"] = 3 * seq * vocab * 4
    return figures  # total 37,744.0 MB = 35.15 GiB


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_llama3_8b_fsdp2_64_ranks_within_15_percent_of_the_hand_calculation():
    layout = make_layout(64, None, None, "off", 1, None, 4096, "bf16-mixed", "adamw")
    trace = trace_step(resolve("8b", None), layout)
    hand = hand_calculation_llama3_8b()
    expected = sum(hand.values())
    assert expected == pytest.approx(37_744.0e6, rel=1e-4)  # the arithmetic in the comments
    assert abs(trace.peak_bytes - expected) / expected <= 0.15, (trace.peak_bytes, expected, trace.breakdown)
    # The parts a hand calculation gets exactly right are exact in the trace too.
    assert trace.tracker["Sharded Param"] == hand["sharded fp32 weights"]
    assert trace.breakdown["optimizer state"] == pytest.approx(hand["AdamW state"], abs=4096)  # + AdamW's step scalars
    # FLOPs: 6 * params * tokens for the matmuls is the classic estimate; the trace adds attention.
    assert trace.flops == pytest.approx(6 * 8.03e9 * 4096, rel=0.15)
    # FSDP2's traffic: every block all-gathered twice (forward, backward) and reduce-scattered once.
    assert trace.collectives["all_gather"]["calls"] == 2 * 32 + 1
    assert trace.collectives["reduce_scatter"]["calls"] == 32 + 1
