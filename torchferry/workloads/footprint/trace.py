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
import warnings
from collections.abc import Callable, Iterator
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


# The trace's time on a 2-core machine (load average about 1), world 1 to 64, hidden 64 to 4096, measured:
# 16 blocks 4.3 s, 32 blocks 11 s, 64 blocks 29 s, 128 blocks 87 s. It grows with the square of the blocks (the
# memory tracker walks every live tensor at every op, and a foreach optimizer op spans every parameter), and
# hardly with the width or the world: t = 0.21 s x blocks + 0.0037 s x blocks^2 fits every point within 10%.
SECONDS_PER_BLOCK, SECONDS_PER_BLOCK_PAIR = 0.21, 0.0037
MAX_BLOCKS = 1024  # about an hour of tracing; the deepest published decoders have fewer than 200 layers
PROGRESS_EVERY_S = 15.0


def predicted_seconds(blocks: int) -> float:
    """How long tracing a model of ``blocks`` blocks takes here (``SECONDS_PER_BLOCK``'s measurements)."""
    return SECONDS_PER_BLOCK * blocks + SECONDS_PER_BLOCK_PAIR * blocks * blocks


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: 40 s, 12 min, 3.5 h, 428 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}" if seconds >= 20 * size else f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def expectation(model: ModelSpec) -> str:
    """What a trace of ``model`` will take, said before it starts: its blocks and the predicted time."""
    if model.layers is None:
        return "its blocks are counted once it is built"
    return f"{model.layers} blocks: about {duration(predicted_seconds(model.layers))} on 2 cores"


def check_traceable(model: ModelSpec) -> None:
    """Refuse, before anything is built, a config whose sizes describe no model (``ModelSpec.check_sizes``) and a
    model whose trace would take hours (its config's block count)."""
    model.check_sizes()
    blocks = model.layers
    if blocks is not None and blocks > MAX_BLOCKS:
        raise UsageError(f"{model.name} has {blocks:,} blocks (num_hidden_layers): tracing one step would take about "
                         f"{duration(predicted_seconds(blocks))} here (a trace's time grows with the square of the blocks: "
                         f"128 took 87 s on 2 cores). A trace takes at most {MAX_BLOCKS:,} blocks; "
                         "check the config's num_hidden_layers, or size the model from a published config.")


class Progress:
    """What a long trace is doing, said every ``PROGRESS_EVERY_S`` seconds from a watcher thread: the phase, the
    block of the forward in progress, the time so far against the prediction."""

    def __init__(self, say: Callable[[str], None], predicted_s: float | None) -> None:
        import threading

        self.say, self.predicted_s = say, predicted_s
        self.phase, self.started = "building on the meta device", time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="ferry-trace-progress", daemon=True)

    def _watch(self) -> None:
        while not self.stop.wait(PROGRESS_EVERY_S):
            elapsed = time.monotonic() - self.started
            of = f" of about {duration(self.predicted_s)}" if self.predicted_s else ""
            self.say(f"still tracing ({duration(elapsed)}{of}): {self.phase}")

    def follow_blocks(self, stack: Any) -> None:
        """Name the forward's block in progress (a forward pre-hook on each: it changes neither graph nor memory)."""
        count = len(stack)
        for index, block in enumerate(stack):
            block.register_forward_pre_hook(lambda *_, i=index: setattr(self, "phase", f"forward, block {i + 1} of {count}"))

    def __enter__(self) -> Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()


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


def trace_step(model: ModelSpec, layout: Layout, say: Callable[[str], None] | None = None) -> StepTrace:
    """Trace one step of rank 0 of ``layout`` on FakeTensor (every rank of an FSDP x TP layout holds
    the same shapes). ``say`` hears what a long trace is doing (``Progress``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from torchferry.workloads.footprint.counting import step_counter
    from torchferry.workloads.footprint.model import batch_and_loss, build
    from torchferry.workloads.footprint.parallelize import apply_layout, blocks, device_mesh, make_optimizer

    started = time.monotonic()
    progress = Progress(say or (lambda text: None), predicted_seconds(model.layers) if model.layers else None)
    with fake_world(layout.world), progress, warnings.catch_warnings():
        # ModTracker's doubt about FSDP2's re-entrant hooks (PyTorch's own warning, once per block): not the user's
        warnings.filterwarnings("ignore", message="The module hierarchy tracking maybe be messed up")
        mesh = device_mesh("cpu", layout)
        module, loaded = build(model, {"batch_size": layout.micro_batch, "seq_len": layout.seq_len})
        progress.phase = "sharding the parameters (FSDP2)"
        apply_layout(module, layout, mesh)
        progress.follow_blocks(blocks(module))
        counter = step_counter()
        # Real tensors may enter (the mesh's rank tables); every tensor made in the mode is fake.
        with FakeTensorMode(allow_non_fake_inputs=True):
            module.to_empty(device="cpu")
            optimizer = make_optimizer(module, layout)
            progress.phase = "creating the optimizer state"
            _prime_optimizer_state(optimizer, list(module.parameters()))
            batch, loss_of = batch_and_loss(module, loaded, layout.micro_batch, layout.seq_len, "cpu")
            tracker = FSDPMemTracker(module, optimizer)
            tracker.track_inputs((batch,))
            try:
                with tracker, counter:
                    loss = loss_of(module)
                    progress.phase = "backward"
                    loss.backward()
                    progress.phase = "optimizer step"
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
