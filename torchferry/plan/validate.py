"""The plan's predicted peak per rank against the peak measured on the built-in device.

One process per rank (as torchrun starts them), the `neuron` process group, the same model and
the same layout (torchferry.workloads.footprint.parallelize) as the plan traced. Each rank takes one step to
create its optimizer state, resets the device's peak statistics, takes a second step and reports
``max_memory_allocated``: the steady-state peak the plan predicts.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from torchferry.errors import UsageError
from torchferry.harness import launch
from torchferry.workloads.footprint.model import ModelSpec
from torchferry.report.plan import Layout, Validation

MAX_RANKS = 8  # each rank is a process on this machine
TOLERANCE = 0.10


def _rank(rank: int, world: int, port: int, model: dict, layout: dict, out: str) -> None:
    """One rank: build, lay out, two steps, write the second step's peak to ``out``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torchferry.device

    torchferry.device.enable()
    import torch
    import torch.distributed as dist

    from torchferry.workloads.footprint.model import batch_and_loss, build
    from torchferry.workloads.footprint.parallelize import apply_layout, device_mesh, make_optimizer

    device_type = torchferry.device.DEVICE_NAME
    accelerator = torch.get_device_module(device_type)
    device = torch.device(device_type, rank)
    accelerator.set_device(device)
    dist.init_process_group(device_type, rank=rank, world_size=world)
    try:
        spec, plan = ModelSpec(**model), Layout(**layout)
        torch.manual_seed(0)
        module, loaded = build(spec, {"batch_size": plan.micro_batch, "seq_len": plan.seq_len}, device="cpu")
        module.to(device)
        apply_layout(module, plan, device_mesh(device_type, plan))
        optimizer = make_optimizer(module, plan)
        batch, loss_of = batch_and_loss(module, loaded, plan.micro_batch, plan.seq_len, device)
        peaks = []
        for _ in range(2):
            accelerator.synchronize()
            accelerator.reset_peak_memory_stats(device)
            loss_of(module).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            accelerator.synchronize()
            peaks.append(accelerator.max_memory_allocated(device))
        Path(out, f"rank{rank}.json").write_text(json.dumps({"peak_bytes": peaks[-1], "first_step_peak_bytes": peaks[0],
                                                             "device": str(device)}))
    except BaseException:
        dist.destroy_process_group()  # no barrier: the other ranks may never reach one
        raise
    launch.leave_group()


def measure(model: ModelSpec, layout: Layout) -> list[dict]:
    """Per-rank peaks of the second step, measured on the built-in device in ``layout.world`` processes."""
    if layout.world > MAX_RANKS:
        raise UsageError(f"--validate: world {layout.world} would start {layout.world} processes here; "
                         f"validate at small scale (--world 2 to {MAX_RANKS}) with a small config (-w small.json).")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="ferry-plan-validate-") as out:
        model_fields = {"kind": model.kind, "name": model.name, "source": model.source, "config": model.config,
                        "spec": model.spec}
        layout_fields = {k: v for k, v in layout.to_dict().items() if k in Layout.__dataclass_fields__}
        mp.spawn(_rank, args=(layout.world, launch.free_port(), model_fields, layout_fields, out), nprocs=layout.world)
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(layout.world)]


def compare(layout: Layout, predicted_bytes: int, measured: list[dict], tolerance: float = TOLERANCE) -> Validation:
    worst = max(m["peak_bytes"] for m in measured)
    error = (predicted_bytes - worst) / worst
    return Validation(layout=layout.label, predicted_bytes=predicted_bytes, measured_bytes=[m["peak_bytes"] for m in measured],
                      error=error, tolerance=tolerance, passed=abs(error) <= tolerance, device=measured[0]["device"].split(":")[0])
