"""One training step of one rank, traced at full size and full world size without allocating it.

The model is built on the meta device, the layout applied there (FSDP2 and TP need only a
device mesh, which PyTorch's fake process group gives at any world size), then its shards are
materialised as FakeTensors and one step (forward, backward, optimizer step) runs under
``FSDPMemTracker`` (torch.distributed._tools), which attributes every live byte at the peak to
parameters, gradients, optimizer state, activations or temporaries, and under the step counter
(FLOPs, op bytes, collectives). The optimizer state is created before the traced step, so the
peak is the one of every step after the first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torchferry.errors import UsageError
from torchferry.workloads.footprint.model import ModelSpec
from torchferry.report.plan import CATEGORIES, Layout, StepTrace

# FSDPMemTracker's reference types -> the plan's categories. All-gather and reduce-scatter buffers
# live only around a collective: temporaries. The step's inputs count with the activations.
TRACKER_CATEGORY = {"Sharded Param": "parameters", "Unsharded Param": "parameters", "Buffer": "parameters",
                    "Sharded Grad": "gradients", "Unsharded Grad": "gradients", "OptState": "optimizer state",
                    "Activation": "activations", "Inputs": "activations", "Temp": "temporaries",
                    "All Gather": "temporaries", "Reduce Scatter": "temporaries"}


@contextmanager
def fake_world(world: int) -> Iterator[None]:
    """PyTorch's fake process group as this process's default group, for the duration of a trace."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UsageError("this process already has a torch.distributed process group; a plan installs a fake "
                         "one at the planned world size. Run the plan in a process of its own.")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _untraceable(exc: BaseException) -> UsageError | None:
    """The FakeTensor failures that mean 'this model cannot be traced', as an error naming the op."""
    from torch._subclasses import fake_tensor as ft
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    reasons = {ft.DataDependentOutputException: "its output depends on tensor values (e.g. .item(), .tolist())",
               ft.DynamicOutputShapeException: "its output shape depends on tensor values (e.g. nonzero, unique)",
               ft.UnsupportedOperatorException: "it has no FakeTensor implementation",
               GuardOnDataDependentSymNode: "control flow depends on tensor values"}
    for kind, why in reasons.items():
        if isinstance(exc, kind):
            op = getattr(exc, "func", None) or str(exc).splitlines()[0]
            return UsageError(f"the model cannot be traced on FakeTensor: op {op} failed because {why}. "
                              "A plan steps the model without real data; make the forward independent of tensor values "
                              "(or plan a model that is), or check it with ferry check on a small size.")
    if isinstance(exc, ft.UnsupportedFakeTensorException):
        return UsageError(f"the model cannot be traced on FakeTensor: {exc.reason}.")
    return None


def _prime_optimizer_state(optimizer: Any, parameters: list) -> None:
    """Create the optimizer state as the first real step would (its values do not matter here)."""
    import torch

    for p in parameters:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def trace_step(model: ModelSpec, layout: Layout) -> StepTrace:
    """Trace one step of rank 0 of ``layout`` on FakeTensor (every rank of an FSDP x TP layout holds
    the same shapes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from torchferry.workloads.footprint.counting import step_counter
    from torchferry.workloads.footprint.model import batch_and_loss, build
    from torchferry.workloads.footprint.parallelize import apply_layout, device_mesh, make_optimizer

    started = time.monotonic()
    with fake_world(layout.world):
        mesh = device_mesh("cpu", layout)
        module, loaded = build(model, {"batch_size": layout.micro_batch, "seq_len": layout.seq_len})
        apply_layout(module, layout, mesh)
        counter = step_counter()
        # Real tensors may enter (the mesh's rank tables); every tensor made in the mode is fake.
        with FakeTensorMode(allow_non_fake_inputs=True):
            module.to_empty(device="cpu")
            optimizer = make_optimizer(module, layout)
            _prime_optimizer_state(optimizer, list(module.parameters()))
            batch, loss_of = batch_and_loss(module, loaded, layout.micro_batch, layout.seq_len, "cpu")
            tracker = FSDPMemTracker(module, optimizer)
            tracker.track_inputs((batch,))
            try:
                with tracker, counter:
                    loss_of(module).backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
            except Exception as exc:
                error = _untraceable(exc)
                if error is None:
                    raise
                raise error from exc
            peaks = tracker.get_tracker_snapshot("peak")
    snapshot = max(peaks.values(), key=lambda s: s.get("Total", 0)) if peaks else {}
    raw = {getattr(k, "value", str(k)): int(v) for k, v in snapshot.items() if getattr(k, "value", k) != "Total"}
    breakdown = dict.fromkeys(CATEGORIES, 0)
    for name, value in raw.items():
        breakdown[TRACKER_CATEGORY.get(name, "temporaries")] += value
    return StepTrace(peak_bytes=int(snapshot.get("Total", 0)), breakdown=breakdown, tracker=raw, flops=counter.flops,
                     op_bytes=counter.op_bytes, collectives={k: dict(v) for k, v in counter.collectives.items()},
                     trace_s=time.monotonic() - started, flops_by_op=dict(counter.by_op))
