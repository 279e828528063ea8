"""DDP's options on the `neuron` process group, 2 ranks, against one device on the global
batch: `find_unused_parameters=True` (Trainer's default under DDP), `static_graph=True`,
several gradient buckets, `no_sync` gradient accumulation, and `device_ids=[rank]`
(DDP then copies inputs on a side stream and calls `Tensor.record_stream`). Also the
device pieces DDP uses: `record_stream` and pinned host memory."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from spawned import Spawned

WORLD, STEPS, BATCH = 2, 4, 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Net(torch.nn.Module):
    """Two used layers and, with `unused`, one that never takes part in the loss."""

    def __init__(self, unused: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(8, 32)
        self.second = torch.nn.Linear(32, 4)
        if unused:
            self.unused = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def _step(model, optimizer, x, y, accumulate: bool) -> None:
    """One optimizer step; with `accumulate`, two half-batch backwards (the first under no_sync)."""
    if accumulate:
        half = x.shape[0] // 2
        with model.no_sync() if hasattr(model, "no_sync") else torch.enable_grad():
            (torch.nn.functional.mse_loss(model(x[:half]), y[:half]) / 2).backward()
        (torch.nn.functional.mse_loss(model(x[half:]), y[half:]) / 2).backward()
    else:
        torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()


def _reference(accumulate: bool, unused: bool) -> dict[str, torch.Tensor]:
    """One device, each rank's shard in turn (the same sums DDP's all-reduce averages)."""
    model = Net(unused).to("neuron:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    per = BATCH // WORLD
    for x, y in _batches():
        for rank in range(WORLD):
            shard = slice(rank * per, (rank + 1) * per)
            xs, ys = x[shard].to("neuron:0"), y[shard].to("neuron:0")
            if accumulate:
                half = per // 2
                for part in (slice(0, half), slice(half, per)):
                    (torch.nn.functional.mse_loss(model(xs[part]), ys[part]) / 2 / WORLD).backward()
            else:
                (torch.nn.functional.mse_loss(model(xs), ys) / WORLD).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().cpu() for k, v in model.named_parameters()}


def _run_case(rank: int, options: dict) -> dict | None:
    """One case on a fresh DDP model; rank 0 returns the parameters, the reference and the buckets."""
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("neuron", rank)
    accumulate = options.pop("accumulate", False)
    on_device_ids = options.pop("device_ids", False)
    # Without either option DDP requires every parameter to take part in the loss.
    unused = options.get("find_unused_parameters", False) or options.get("static_graph", False)
    model = DistributedDataParallel(Net(unused).to(device), device_ids=[rank] if on_device_ids else None,
                                    **options)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    per = BATCH // WORLD
    for x, y in _batches():
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        # With device_ids, DDP itself moves the CPU inputs (side stream + record_stream).
        _step(model, optimizer, x if on_device_ids else x.to(device), y.to(device), accumulate)
    params = {k.removeprefix("module."): v.detach().cpu() for k, v in model.named_parameters()}
    if rank != 0:
        return None
    return {"params": params, "reference": _reference(accumulate, unused),
            "bucket_sizes": model._get_ddp_logging_data().get("bucket_sizes")}


def _worker(rank: int, port: int, cases: list[str], out: str) -> None:
    """Every case in turn, each on its own DDP model, in one process group; rank 0 saves each case's result."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    torch.neuron.set_device(torch.device("neuron", rank))
    dist.init_process_group("neuron", rank=rank, world_size=WORLD)
    for case in cases:
        result = _run_case(rank, dict(CASES[case]))
        if rank == 0:
            torch.save(result, f"{out}/{case}.pt")
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()


CASES = {
    "find_unused_parameters": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "static_graph_find_unused": {"static_graph": True, "find_unused_parameters": True},
    "small_buckets": {"bucket_cap_mb": 0.0005, "find_unused_parameters": True},
    "no_sync": {"accumulate": True},
    "no_sync_find_unused": {"accumulate": True, "find_unused_parameters": True},
    "device_ids": {"device_ids": True},
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Every case in one pair of processes (tests/device/spawned.py): each case builds its own DDP model as in a run
    of its own, and the start-up, most of a run's time, is paid once instead of once per case."""
    spawned = Spawned(tmp_path_factory)

    def start(out) -> None:
        mp.spawn(_worker, args=(_free_port(), list(CASES), str(out)), nprocs=WORLD)

    return lambda case: spawned.result("ddp-options", case, start)


@pytest.mark.multiproc
@pytest.mark.parametrize("case", list(CASES))
def test_ddp_option_trains_like_one_device(trained, case: str):
    result = trained(case)
    assert result["params"].keys() == result["reference"].keys()
    for name, ref in result["reference"].items():
        torch.testing.assert_close(result["params"][name], ref, rtol=1e-5, atol=1e-6, msg=name)
    initial = Net()
    if "unused.weight" in result["params"]:
        assert torch.equal(result["params"]["unused.weight"], initial.unused.weight.detach()), \
            "the unused layer must not move"
    assert not torch.equal(result["params"]["first.weight"], initial.first.weight.detach())
    if case == "small_buckets":
        assert len(result["bucket_sizes"].split(",")) > 1, result["bucket_sizes"]


def test_record_stream_checks_tensor_and_stream_and_is_counted(neuron):
    x = torch.ones(4, device="neuron")
    neuron.clear_op_tracking()
    x.record_stream(neuron.current_stream())
    x.record_stream(neuron.Stream())
    assert neuron.get_executed_ops().get("aten::record_stream") == 2
    with pytest.raises(RuntimeError, match="expected a neuron stream"):
        x.record_stream(torch.Stream(device="cpu"))


def test_pinned_memory_is_pinned_where_it_is(neuron):
    pinned = torch.empty(1024).pin_memory()
    assert pinned.is_pinned() and pinned[100:].is_pinned()
    assert not torch.empty(1024).is_pinned(), "ordinary host memory is not pinned"
    assert torch.empty(16, pin_memory=True).is_pinned()
    # Non-blocking copies from pinned memory land on the device.
    assert torch.equal(pinned.fill_(3).to("neuron", non_blocking=True).cpu(), pinned)
