"""How a training job is spread over the ranks, and every check on it that needs no tracing.

A layout is the world size (one rank per logical core), its split into an FSDP2 sharding degree
times a tensor-parallel degree, activation checkpointing, the per-rank micro-batch, the sequence
length, the mixed-precision policy and the optimizer. The checks here run before anything is
built, so a layout that cannot exist fails in milliseconds with the values that would work.
"""

from __future__ import annotations

from torchferry.errors import UsageError
from torchferry.report.plan import Layout
from torchferry.workloads.footprint.parallelize import PRECISIONS

CHECKPOINTING = {
    "off": "every activation a backward needs is kept",
    "on": "each transformer block is recomputed in the backward (only its input is kept)",
    "selective": "inside each block, matmul and attention outputs are kept, everything else is recomputed",
}
OPTIMIZERS = {"adamw": "AdamW (two fp32-or-storage-dtype moments per weight)", "sgd": "SGD with momentum (one buffer per weight)"}


def factor_pairs(world: int) -> str:
    return ", ".join(f"{world // tp}x{tp}" for tp in range(1, world + 1) if world % tp == 0)


def make_layout(world: int, fsdp: int | None, tp: int | None, checkpointing: str, micro_batch: int | None,
                batch: int | None, seq_len: int, precision: str, optimizer: str) -> Layout:
    """The layout the options describe, or a UsageError saying which value is wrong and what would do."""
    for name, value in (("--world", world), ("--fsdp", fsdp), ("--tp", tp), ("--micro-batch", micro_batch),
                        ("--batch-size", batch), ("--seq-len", seq_len)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1 (got {value}).")
    if checkpointing not in CHECKPOINTING:
        raise UsageError(f"unknown --checkpointing {checkpointing!r}. Valid: {', '.join(CHECKPOINTING)}.")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}. Valid: {', '.join(PRECISIONS)}.")
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown --optimizer {optimizer!r}. Valid: {', '.join(OPTIMIZERS)}.")
    if fsdp is None and tp is None:
        fsdp, tp = world, 1
    elif tp is None:
        tp = world // fsdp if world % fsdp == 0 else None
    elif fsdp is None:
        fsdp = world // tp if world % tp == 0 else None
    if tp is None or fsdp is None or fsdp * tp != world:
        raise UsageError(f"world size {world} does not factor into FSDP {fsdp or '?'} x TP {tp or '?'}. "
                         f"Valid FSDP x TP for {world} ranks: {factor_pairs(world)}.")
    if batch is not None and micro_batch is not None:
        raise UsageError("--batch-size (global) and --micro-batch (per rank) both set the batch; give one.")
    if batch is not None:
        if batch % fsdp:
            near = sorted({max(fsdp, batch // fsdp * fsdp), (batch // fsdp + 1) * fsdp})
            raise UsageError(f"a global batch of {batch} sequences does not split over the {fsdp} "
                             f"data-parallel ranks (world {world} / TP {tp}). Valid: a multiple of {fsdp}, e.g. "
                             f"{' or '.join(map(str, near))}; or give --micro-batch per rank.")
        micro_batch = batch // fsdp
    return Layout(world=world, fsdp=fsdp, tp=tp, checkpointing=checkpointing, micro_batch=micro_batch or 1,
                  seq_len=seq_len, precision=precision, optimizer=optimizer)


def check_model_fits_tp(layout: Layout, shape: dict) -> None:
    """Tensor parallelism splits heads and the MLP width: each must divide by the TP degree."""
    if layout.tp == 1 or not shape:
        return
    dims = {"attention heads": shape.get("num_attention_heads"), "key-value heads": shape.get("num_key_value_heads"),
            "MLP width": shape.get("intermediate_size")}
    bad = {name: value for name, value in dims.items() if value and value % layout.tp}
    if bad:
        valid = [t for t in range(1, layout.world + 1) if layout.world % t == 0
                 and all(not v or v % t == 0 for v in dims.values())]
        raise UsageError(f"TP {layout.tp} does not divide the model's "
                         f"{', '.join(f'{n} ({v})' for n, v in bad.items())}. Valid TP degrees for this model on "
                         f"{layout.world} ranks: {', '.join(map(str, valid))}.")


def search_layouts(base: Layout, shape: dict) -> tuple[list[Layout], list[str]]:
    """The layouts worth trying on an instance, and why others were left out: FSDP over every rank,
    or FSDP x TP 2 or 4 (TP stays inside a chip's logical cores), each without and with
    checkpointing. The global batch, sequence, precision and optimizer are the user's, so every
    candidate does the same work per step and step times compare."""
    layouts, skipped = [], []
    for tp in (1, 2, 4):
        fsdp = base.world // tp
        if base.world % tp or base.global_batch % fsdp:
            skipped.append(f"FSDP {fsdp} x TP {tp}: the global batch of {base.global_batch} does not split over "
                           f"{fsdp} data-parallel ranks")
            continue
        for checkpointing in ("off", "on"):
            candidate = Layout(world=base.world, fsdp=fsdp, tp=tp, checkpointing=checkpointing,
                               micro_batch=base.global_batch // fsdp, seq_len=base.seq_len, precision=base.precision,
                               optimizer=base.optimizer)
            try:
                check_model_fits_tp(candidate, shape)
            except UsageError as exc:
                skipped.append(f"{candidate.label}: {exc}")
                break
            layouts.append(candidate)
    return layouts, skipped
