"""A layout applied to a model: tensor parallelism, activation checkpointing, FSDP2, the optimizer.

The tracer (torchferry.workloads.footprint.trace) and `ferry plan --validate`'s workers both call these
functions, so the model whose peak is predicted on FakeTensor and the one whose peak is measured on the
device are built the same way.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torchferry.errors import UsageError
from torchferry.report.plan import Layout

# name -> (storage dtype of weights, gradients and optimizer state; FSDP2 param_dtype; FSDP2 reduce_dtype; meaning)
PRECISIONS = {
    "bf16-mixed": ("float32", "bfloat16", "float32",
                   "bf16 compute; fp32 master weights, gradients, optimizer state and gradient reduction"),
    "bf16": ("bfloat16", None, None, "bf16 everywhere: weights, gradients, optimizer state and reduction"),
    "fp32": ("float32", None, None, "fp32 everywhere"),
}

# Megatron-style split of a Llama block: q/k/v and gate/up by output features, o/down by input features,
# so each block needs one all-reduce in the forward after attention and one after the MLP.
TP_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
           "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
           "mlp.down_proj": "rowwise"}


def blocks(model: Any) -> Any:
    """The model's stack of repeated blocks: the longest ``nn.ModuleList`` (a transformers decoder's layers)."""
    import torch.nn as nn

    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    return max(lists, key=len) if lists else None


def dtypes(precision: str) -> tuple[Any, Any, Any]:
    import torch

    storage, param, reduce = PRECISIONS[precision][:3]
    return tuple(getattr(torch, name) if name else None for name in (storage, param, reduce))


def _save_matmuls(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Selective checkpointing policy: keep what is expensive to recompute (matmuls, attention)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    expensive = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
                 torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                 torch.ops.aten._scaled_dot_product_flash_attention.default,
                 torch.ops.aten._scaled_dot_product_efficient_attention.default}
    return CheckpointPolicy.MUST_SAVE if func in expensive else CheckpointPolicy.PREFER_RECOMPUTE


def apply_layout(model: Any, layout: Layout, mesh: Any) -> Any:
    """TP inside each block, then checkpointing, then FSDP2 per block and at the root; returns the model.

    ``mesh`` is a 2-D device mesh named ("dp", "tp") of shape (layout.fsdp, layout.tp).
    """
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    storage, param_dtype, reduce_dtype = dtypes(layout.precision)
    if storage != torch.float32:
        model.to(storage)
    stack = blocks(model)
    if stack is None:
        raise UsageError(f"the model ({type(model).__name__}) has no stack of blocks (an nn.ModuleList); "
                         "FSDP2 is applied per block. Build the model's repeated layers in an nn.ModuleList.")
    if layout.tp > 1:
        _tensor_parallel(stack, mesh["tp"])
    if layout.checkpointing != "off":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        options = {} if layout.checkpointing == "on" else {
            "context_fn": partial(create_selective_checkpoint_contexts, _save_matmuls)}
        for i, block in enumerate(stack):
            stack[i] = checkpoint_wrapper(block, **options)
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for block in stack:
        fully_shard(block, mesh=mesh["dp"], mp_policy=policy)
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    return model


def _tensor_parallel(stack: Any, tp_mesh: Any) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for block in stack:
        names = {name for name, _ in block.named_modules()}
        missing = sorted(set(TP_PLAN) - names)
        if missing:
            raise UsageError(f"tensor parallelism needs Llama-shaped blocks with {', '.join(TP_PLAN)}; "
                             f"{type(block).__name__} has no {', '.join(missing)}. Use --tp 1 for this model.")
        parallelize_module(block, tp_mesh, {name: styles[style]() for name, style in TP_PLAN.items()})


def make_optimizer(model: Any, layout: Layout) -> Any:
    """The layout's optimizer with ``foreach=True``: PyTorch's default on accelerators (and its
    temporaries are part of the peak), stated here because on CPU tensors the default differs."""
    import torch

    if layout.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)


def device_mesh(device_type: str, layout: Layout) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (layout.fsdp, layout.tp), mesh_dim_names=("dp", "tp"))
