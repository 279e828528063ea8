"""A decoder block with a top-2 mixture-of-experts MLP and grouped-query attention (model code only)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self, dim, hidden, num_experts=8, top_k=2, capacity_factor=1.25):
        super().__init__()
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim, hidden) for _ in range(num_experts)])
        self.top_k = top_k
        self.capacity_factor = capacity_factor

    def forward(self, x):
        b, s, d = x.shape
        flat = x.reshape(-1, d)
        weights, chosen = self.router(flat).softmax(-1).topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        tokens_per_expert = torch.bincount(chosen.flatten(), minlength=len(self.experts))
        capacity = int(tokens_per_expert.max())
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        self.last_capacity = capacity
        return out.view(b, s, d)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, padding_mask=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                     self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        attn_mask = None
        if padding_mask is not None:
            attn_mask = padding_mask[:, None, None, :].bool()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=attn_mask is None)
        return self.proj(out.transpose(1, 2).reshape(b, s, -1))


class DecoderBlock(nn.Module):
    def __init__(self, dim=512, heads=8, kv_heads=2, hidden=1408):
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.norm2 = nn.RMSNorm(dim)
        self.moe = MoE(dim, hidden)

    def forward(self, x, padding_mask=None):
        x = x + self.attn(self.norm1(x), padding_mask)
        return x + self.moe(self.norm2(x))


def log_router_stats(module, inputs, output):
    print("moe output norm", output.norm())


def build(num_layers=4, debug=False):
    blocks = nn.Sequential(*[DecoderBlock() for _ in range(num_layers)])
    if debug:
        for block in blocks:
            block.moe.register_forward_hook(log_router_stats)
    return blocks
