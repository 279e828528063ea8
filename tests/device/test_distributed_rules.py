"""What TorchNeuron's `neuron` process group refuses (the profile's `pg_*` rules), on 2 and 4 ranks: each
refusal with TorchNeuron's error type and message, its clean twin that still runs (all_reduce, the
default-group barrier, all_to_all without split sizes on 4 ranks, an FSDP2 step), and the rule switched
off, where gloo runs what TorchNeuron refuses. Sources: torch_neuronx/distributed/backend.py and
python_ops/xla_ops/*.py (docs/device/distributed.md, "What TorchNeuron's group refuses")."""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from spawned import Spawned

pytestmark = pytest.mark.multiproc
PG_RULES = ("pg_point_to_point", "pg_all_to_all", "pg_default_group_barrier", "pg_reduce_ops", "pg_empty_tensors",
            "pg_complex_tensors")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _set_pg_rules(on: bool) -> None:
    from torchferry.device import _runtime, target

    profile = _runtime.profile()
    target.configure(_runtime.core(), dataclasses.replace(
        profile, rules={**profile.rules, **dict.fromkeys(PG_RULES, on)}), "warn")


def _outcome(fn) -> dict:
    """What a case did on this rank: its value, or the error it raised (type and message)."""
    try:
        return {"ok": True, "value": fn()}
    except Exception as exc:  # noqa: BLE001 - the error is the result under test
        return {"ok": False, "type": type(exc).__name__, "message": str(exc)}


def _p2p(rank: int, dev: torch.device, isend: bool = False) -> list[float]:
    import torch.distributed as dist

    t = torch.full((2,), float(rank), device=dev)
    if rank > 1:
        return []  # ranks 0 and 1 exchange; the others wait at the next collective
    if isend:
        op = dist.P2POp(dist.isend if rank == 0 else dist.irecv, t, 1 - rank)
        for work in dist.batch_isend_irecv([op]):
            work.wait()
    elif rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
    return t.cpu().tolist()


def _all_to_all_single(rank: int, world: int, dev: torch.device, splits: list[int] | None = None) -> list[float]:
    import torch.distributed as dist

    # Rank r sends splits[j] rows to rank j, so it receives splits[r] rows from each rank.
    received = [splits[rank]] * world if splits else None
    out = torch.empty(sum(received) if splits else world, device=dev)
    dist.all_to_all_single(out, torch.full((sum(splits) if splits else world,), float(rank), device=dev),
                           received, splits)
    return out.cpu().tolist()


def _fsdp2_step(dev: torch.device) -> float:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(dev)
    fully_shard(model)
    loss = model(torch.ones(2, 8, device=dev)).square().mean()
    loss.backward()
    return loss.item()


def _cases(rank: int, world: int, dev: torch.device) -> dict:
    import torch.distributed as dist

    def reduce(op):
        t = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(t, op=op)
        return t.cpu().tolist()

    def reduce_complex():
        t = torch.ones(2, dtype=torch.complex64).to(dev)  # made on the host: the device refuses complex fills
        dist.all_reduce(t)
        return t.cpu().tolist()

    def subgroup_barrier():
        group = dist.new_group(list(range(world // 2)))  # every rank takes part in new_group
        if rank < world // 2:
            dist.barrier(group=group)
        return True

    cases = {
        "send_recv": lambda: _p2p(rank, dev),
        "batch_isend_irecv": lambda: _p2p(rank, dev, isend=True),
        "subgroup_barrier": subgroup_barrier,
        "all_reduce_product": lambda: reduce(dist.ReduceOp.PRODUCT),
        "all_reduce_sum": lambda: reduce(dist.ReduceOp.SUM),
        "all_reduce_max": lambda: reduce(dist.ReduceOp.MAX),
        "all_reduce_empty": lambda: dist.all_reduce(torch.empty(0, device=dev)),
        "reduce_scatter_empty": lambda: dist.reduce_scatter_tensor(torch.empty(0, device=dev),
                                                                   torch.empty(0, device=dev)),
        "broadcast_empty": lambda: dist.broadcast(torch.empty(0, device=dev), src=0) and True,
        "all_gather_into_tensor": lambda: _gathered(rank, world, dev),
        "all_to_all_single": lambda: _all_to_all_single(rank, world, dev),
        "all_to_all_single_uneven": lambda: _all_to_all_single(rank, world, dev, [1] * (world - 1) + [2]),
        "all_to_all_single_twos": lambda: _all_to_all_single(rank, world, dev, [2] * world),
        "default_barrier": lambda: dist.barrier() or True,
        # DDP broadcasts its complex parameters to the group as they are; dist.all_reduce a real view
        "ddp_complex_parameter": lambda: _ddp_with_complex_parameter(dev),
        "all_reduce_complex": lambda: reduce_complex(),
    }
    if world == 2:
        cases["fsdp2_step"] = lambda: _fsdp2_step(dev)
    return cases


def _ddp_with_complex_parameter(dev: torch.device) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    model = torch.nn.Linear(2, 2).to(dev)
    model.phase = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64).to(dev))  # made on the host
    DistributedDataParallel(model)  # broadcasts rank 0's parameters and buffers
    return True


def _gathered(rank: int, world: int, dev: torch.device) -> list[float]:
    import torch.distributed as dist

    out = torch.empty(world, device=dev)
    dist.all_gather_into_tensor(out, torch.full((1,), float(rank), device=dev))
    return out.cpu().tolist()


def _worker(rank: int, world: int, port: int, out: str) -> None:
    """Every case with the rules on, then with them off, in one process group; each rank saves its outcomes."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), TORCHFERRY_COLLECTIVE_TIMEOUT="60")
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    dist.init_process_group("neuron", rank=rank, world_size=world)
    dev = torch.device("neuron", rank)
    results = {}
    for rules_on in (True, False):
        _set_pg_rules(rules_on)
        for name, case in _cases(rank, world, dev).items():
            results[f"{name}/{'on' if rules_on else 'off'}"] = _outcome(case)
    _set_pg_rules(True)
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()
    torch.save(results, f"{out}/rank{rank}.pt")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case of a world size in one set of processes (tests/device/spawned.py); `outcomes(world, rank)`."""
    spawned = Spawned(tmp_path_factory)

    def get(world: int, rank: int = 0) -> dict:
        def start(out) -> None:
            mp.spawn(_worker, args=(world, _free_port(), str(out)), nprocs=world)

        return spawned.result(f"pg-rules-{world}", f"rank{rank}", start)

    return get


def _refused(outcome: dict, error: str, *needles: str) -> None:
    assert not outcome["ok"], f"expected {error}, but the case ran: {outcome}"
    assert outcome["type"] == error, outcome
    for needle in (*needles, "Next step", "= false"):
        assert needle in outcome["message"], (needle, outcome["message"])


# ------------------------------------------------------------------ point to point
@pytest.mark.parametrize("case", ["send_recv", "batch_isend_irecv"])
def test_send_and_recv_are_refused_as_on_torchneuron_and_run_with_the_rule_off(outcomes, case):
    for rank in (0, 1):
        _refused(outcomes(2, rank)[f"{case}/on"], "RuntimeError", "No backend type associated with device type neuron",
                 "distributed/backend.py")
    assert outcomes(2, 1)[f"{case}/off"] == {"ok": True, "value": [0.0, 0.0]}, "rank 1 receives rank 0's tensor"


# ------------------------------------------------------------------ all_to_all
def test_all_to_all_on_two_ranks_is_refused_for_its_group_size(outcomes):
    _refused(outcomes(2)["all_to_all_single/on"], "RuntimeError", "Operation all_to_all failed to be handled",
             "unsupported world size 2, supported sizes: 4, 8, 16, or multiples of 32", "all_to_all_xla.py")
    assert outcomes(2, 1)["all_to_all_single/off"] == {"ok": True, "value": [0.0, 1.0]}


def test_all_to_all_without_split_sizes_on_four_ranks_runs(outcomes):
    for rank in range(4):
        assert outcomes(4, rank)["all_to_all_single/on"] == {"ok": True, "value": [0.0, 1.0, 2.0, 3.0]}


@pytest.mark.parametrize("case", ["all_to_all_single_uneven", "all_to_all_single_twos"])
def test_split_sizes_other_than_ones_are_refused_and_run_with_the_rule_off(outcomes, case):
    received = "[1, 1, 1, 1]" if case.endswith("uneven") else "[2, 2, 2, 2]"  # rank 0's
    sent = "input_split_sizes: [1, 1, 1, 2]" if case.endswith("uneven") else f"output_split_sizes: {received}"
    _refused(outcomes(4)[f"{case}/on"], "NotImplementedError",
             f"alltoall_base: Only even split sizes are supported. Got {sent}")
    assert outcomes(4)[f"{case}/off"]["ok"], outcomes(4)[f"{case}/off"]


# ------------------------------------------------------------------ barrier
def test_a_barrier_on_a_subgroup_is_refused_and_the_default_group_barrier_twin_runs(outcomes):
    _refused(outcomes(2)["subgroup_barrier/on"], "NotImplementedError",
             "Barrier is implemented only for default group")
    assert outcomes(2, 1)["subgroup_barrier/on"]["ok"], "rank 1 is not in the subgroup and calls no barrier"
    assert outcomes(2)["subgroup_barrier/off"]["ok"]
    assert outcomes(2)["default_barrier/on"] == {"ok": True, "value": True}


# ------------------------------------------------------------------ reduce ops
def test_a_product_all_reduce_is_refused_and_sum_and_max_twins_run(outcomes):
    _refused(outcomes(2)["all_reduce_product/on"], "RuntimeError", "Operation all_reduce failed to be handled",
             "unsupported reduce operation 'PRODUCT'", "reduce_functions.py")
    assert outcomes(2)["all_reduce_product/off"] == {"ok": True, "value": [2.0, 2.0]}
    assert outcomes(2)["all_reduce_sum/on"] == {"ok": True, "value": [3.0, 3.0]}
    assert outcomes(2)["all_reduce_max/on"] == {"ok": True, "value": [2.0, 2.0]}


# ------------------------------------------------------------------ empty tensors
@pytest.mark.parametrize(("case", "op"), [("all_reduce_empty", "all_reduce"),
                                          ("reduce_scatter_empty", "reduce_scatter")])
def test_collectives_of_empty_tensors_are_refused_and_run_with_the_rule_off(outcomes, case, op):
    _refused(outcomes(2)[f"{case}/on"], "RuntimeError", f"Operation {op} failed to be handled",
             "tensors cannot be empty")
    assert outcomes(2)[f"{case}/off"]["ok"], outcomes(2)[f"{case}/off"]


def test_an_empty_broadcast_twin_is_skipped_there_and_runs_here(outcomes):
    assert outcomes(2)["broadcast_empty/on"]["ok"], outcomes(2)["broadcast_empty/on"]


# ------------------------------------------------------------------ complex tensors
def test_complex_tensors_reaching_the_group_are_refused_and_dist_all_reduces_real_view_twin_runs(outcomes):
    _refused(outcomes(2)["ddp_complex_parameter/on"], "RuntimeError",
             "Compilation error occurred on Neuron for operation=broadcast - complex params not supported")
    assert outcomes(2)["ddp_complex_parameter/off"] == {"ok": True, "value": True}
    # dist.all_reduce hands the group torch.view_as_real(t), a float32 tensor, there as here
    assert outcomes(2)["all_reduce_complex/on"] == {"ok": True, "value": [(2 + 0j), (2 + 0j)]}


# ------------------------------------------------------------------ clean twins
@pytest.mark.parametrize("world", [2, 4])
def test_all_gather_into_tensor_runs_under_the_rules(outcomes, world):
    assert outcomes(world)["all_gather_into_tensor/on"] == {"ok": True, "value": [float(r) for r in range(world)]}


def test_an_fsdp2_step_runs_under_the_rules(outcomes):
    on, off = outcomes(2)["fsdp2_step/on"], outcomes(2)["fsdp2_step/off"]
    assert on["ok"], on
    assert on["value"] == off["value"]
