"""The `neuron` process-group backend: registration, every collective on neuron tensors,
mixed backend specs, the torchrun device-count rule, and faults that fail loudly."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from torchferry.device import _settings

HERE = Path(__file__).resolve()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_rank(rank: int, world: int, port: int, spec: str = "neuron") -> torch.device:
    """Join a process group the way torchrun's environment would, on neuron:LOCAL_RANK."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ.pop("NEURON_RT_VISIBLE_CORES", None)
    os.environ.pop("NEURON_RT_NUM_CORES", None)
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    device = torch.device("neuron", rank)
    torch.neuron.set_device(device)
    dist.init_process_group(spec, rank=rank, world_size=world)
    return device


# ---------------------------------------------------------------- settings (no processes)

def test_torchrun_local_world_size_sets_device_count_when_neuron_rt_unset():
    assert _settings.visible_device_count({"LOCAL_WORLD_SIZE": "4"}) == 4
    assert _settings.visible_device_count({}) == 1


def test_neuron_rt_variables_win_over_local_world_size():
    env = {"LOCAL_WORLD_SIZE": "4", "NEURON_RT_VISIBLE_CORES": "2"}
    assert _settings.visible_device_count(env) == 1
    assert _settings.visible_device_count({"LOCAL_WORLD_SIZE": "4", "NEURON_RT_NUM_CORES": "2"}) == 2


def test_a_rank_whose_local_rank_is_a_seen_device_makes_it_current_and_a_pinned_rank_keeps_neuron_0(run_python):
    # TorchNeuron's init_process_group makes neuron:LOCAL_RANK current (torch_neuronx/distributed/backend.py,
    # _neuron_runtime_setup); a launcher that pins one core per process leaves one device, neuron:0.
    result = run_python("""
        import torch, torchferry.device
        from torchferry.device.distributed import select_local_device
        torchferry.device.enable()
        chosen = select_local_device({"LOCAL_RANK": "1"})
        print(chosen, torch.neuron.current_device(), select_local_device({"LOCAL_RANK": "5"}), select_local_device({}))
    """, env={"NEURON_RT_NUM_CORES": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1", "None", "None"]
    pinned = run_python("""
        import torch, torchferry.device
        from torchferry.device.distributed import select_local_device
        torchferry.device.enable()
        print(select_local_device({"LOCAL_RANK": "1"}), torch.neuron.current_device())
    """, env={"NEURON_RT_VISIBLE_CORES": "3"})
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.split() == ["None", "0"]


def test_collective_timeout_reads_variable_and_shortens_torch_default():
    from datetime import timedelta

    import torch.distributed as dist

    from torchferry.device.distributed import DEFAULT_TIMEOUT, collective_timeout
    from torchferry.errors import UsageError

    assert collective_timeout({"TORCHFERRY_COLLECTIVE_TIMEOUT": "7"}, None) == timedelta(seconds=7)
    assert collective_timeout({}, dist.constants.default_pg_timeout) == DEFAULT_TIMEOUT
    assert collective_timeout({}, timedelta(seconds=42)) == timedelta(seconds=42)
    with pytest.raises(UsageError, match="TORCHFERRY_COLLECTIVE_TIMEOUT"):
        collective_timeout({"TORCHFERRY_COLLECTIVE_TIMEOUT": "soon"}, None)


def test_enable_registers_neuron_as_default_backend_of_the_device():
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    assert dist.get_default_backend_for_device("neuron") == "neuron"
    assert "neuron" in dist.Backend.backend_list


# ---------------------------------------------------------------- collectives

def _collectives(rank: int, world: int, port: int, spec: str, out: str) -> None:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from torchferry.device import _runtime, target

    dev = init_rank(rank, world, port, spec)
    # The transport runs every collective; what TorchNeuron's group refuses of them (send/recv, all_to_all
    # on 2 ranks, ...) is the profile's pg_* rules, switched off here and tested in test_distributed_rules.py.
    profile = _runtime.profile()
    target.configure(_runtime.core(), dataclasses.replace(
        profile, rules={name: on and not name.startswith("pg_") for name, on in profile.rules.items()}), "warn")
    results: dict[str, bool] = {}

    def full(value: float, n: int = 2) -> torch.Tensor:
        return torch.full((n,), float(value), device=dev)

    t = full(rank + 1)
    host = _runtime.core()._host_view(t)
    dist.all_reduce(t)
    results["all_reduce"] = t.device == dev and t.cpu().eq(world * (world + 1) / 2).all().item()
    results["all_reduce_in_place_on_device_bytes"] = host.data_ptr() == t.data_ptr()

    gathered = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(gathered, full(rank))
    results["all_gather"] = [g.cpu()[0].item() for g in gathered] == list(range(world))

    flat = torch.empty(2 * world, device=dev)
    dist.all_gather_into_tensor(flat, full(rank))
    results["all_gather_into_tensor"] = flat.cpu().tolist() == [float(r) for r in range(world) for _ in range(2)]

    shard = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(shard, torch.arange(2.0 * world, device=dev))
    results["reduce_scatter_tensor"] = shard.cpu().tolist() == [world * 2.0 * rank, world * (2.0 * rank + 1)]

    shard = torch.empty(2, device=dev)
    dist.reduce_scatter(shard, [full(r) for r in range(world)])
    results["reduce_scatter"] = shard.cpu().eq(world * rank).all().item()

    b = full(rank, 3)
    dist.broadcast(b, src=world - 1)
    results["broadcast"] = b.cpu().eq(world - 1).all().item()

    a2a = torch.empty(world, device=dev)
    dist.all_to_all_single(a2a, full(rank, world))
    results["all_to_all_single"] = a2a.cpu().tolist() == [float(r) for r in range(world)]

    outs = [torch.empty(1, device=dev) for _ in range(world)]
    dist.all_to_all(outs, [full(rank * 10 + r, 1) for r in range(world)])
    results["all_to_all"] = [o.item() for o in outs] == [float(r * 10 + rank) for r in range(world)]

    dist.barrier()
    p2p = full(rank)
    if rank == 0:
        dist.send(p2p, 1)
    elif rank == 1:
        dist.recv(p2p, 0)
    results["send_recv"] = p2p.cpu().eq(0 if rank == 1 else rank).all().item()

    got = [torch.empty(1, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(full(rank, 1), got, dst=0)
    results["gather"] = rank != 0 or [g.item() for g in got] == [float(r) for r in range(world)]
    sc = torch.empty(1, device=dev)
    dist.scatter(sc, [full(r, 1) for r in range(world)] if rank == 0 else None, src=0)
    results["scatter"] = sc.item() == rank

    work = dist.all_reduce(full(1), async_op=True)
    value = work.get_future().wait()
    results["future_value_on_device"] = value[0].device == dev and value[0].cpu().eq(world).all().item()

    group = dist.group.WORLD
    results["funcol_all_reduce"] = funcol.all_reduce(full(1), "sum", group).cpu().eq(world).all().item()
    g = funcol.all_gather_tensor(full(rank), 0, group)
    results["funcol_all_gather"] = g.cpu().tolist() == [float(r) for r in range(world) for _ in range(2)]
    s = funcol.reduce_scatter_tensor(torch.ones(2 * world, device=dev), "sum", 0, group)
    results["funcol_reduce_scatter"] = s.cpu().eq(world).all().item()
    a = funcol.all_to_all_single(torch.arange(float(world), device=dev), None, None, group)
    results["funcol_all_to_all_single"] = a.cpu().eq(rank).all().item()

    objects: list = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    results["all_gather_object"] = objects == [{"rank": r} for r in range(world)]
    results["cpu_tensor_all_reduce"] = (lambda c: (dist.all_reduce(c), c.eq(world).all().item())[1])(torch.ones(2))
    results["backend_name"] = dist.get_backend() == spec
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()
    torch.save(results, f"{out}/{rank}.pt")


@pytest.mark.multiproc
@pytest.mark.parametrize(
    ("world", "spec"), [(2, "neuron"), (4, "cpu:gloo,neuron:neuron")], ids=["2-neuron", "4-mixed"]
)
def test_every_collective_works_on_neuron_tensors(tmp_path, world, spec):
    mp.spawn(_collectives, args=(world, free_port(), spec, str(tmp_path)), nprocs=world)
    for rank in range(world):
        results = torch.load(tmp_path / f"{rank}.pt")
        failed = [name for name, ok in results.items() if not ok]
        assert not failed, f"rank {rank}: {failed}"


# ---------------------------------------------------------------- faults

def _fault_worker(rank: int, world: int, port: int, fault: str, out: str) -> None:
    import torch.distributed as dist

    dev = init_rank(rank, world, port)
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    if rank == world - 1:
        if fault == "die":
            os._exit(3)
        time.sleep(60)  # hang: never enters the next collective
        os._exit(0)
    started = time.monotonic()
    try:
        dist.all_reduce(t)
        message = "no error"
    except Exception as exc:  # what the user sees
        message = f"{type(exc).__name__}: {exc}"
    Path(out, f"{rank}.part").write_text(f"{time.monotonic() - started:.1f}\n{message}")
    os.replace(Path(out, f"{rank}.part"), Path(out, f"{rank}.txt"))  # whole or absent: the test reads it while we sleep
    time.sleep(8)  # rank 0 hosts the store the other survivors read heartbeats from
    os._exit(0)


def _launch(world: int, fault: str, out: Path, timeout_s: str) -> list[subprocess.Popen]:
    port = free_port()
    env = {**os.environ, "TORCHFERRY_COLLECTIVE_TIMEOUT": timeout_s, "PYTHONPATH": str(HERE.parent)
           + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = ("import sys, test_distributed as t; "
            "t._fault_worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])")
    return [subprocess.Popen([sys.executable, "-c", code, str(r), str(world), str(port), fault, str(out)],
                             env=env) for r in range(world)]


@pytest.mark.multiproc
@pytest.mark.parametrize("fault", ["die", "hang"])
def test_dead_or_hung_rank_fails_the_others_naming_rank_and_collective(tmp_path, fault):
    world = 3
    procs = _launch(world, fault, tmp_path, timeout_s="6")
    survivors = [tmp_path / f"{rank}.txt" for rank in range(world - 1)]
    try:
        # Done when every survivor has written what it saw (or has exited without): not after rank 0's 8 s of
        # hosting the store for the others, which only the survivors still reading heartbeats need.
        deadline = time.monotonic() + 90
        while not all(p.is_file() or proc.poll() is not None for p, proc in zip(survivors, procs)):
            assert time.monotonic() < deadline, "the survivors neither reported nor exited within 90 s"
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.kill()
    for rank in range(world - 1):
        elapsed, message = (tmp_path / f"{rank}.txt").read_text().split("\n", 1)
        assert "CollectiveError" in message and "all_reduce" in message, message
        assert f"rank {world - 1}" in message, message
        assert float(elapsed) < 30, f"rank {rank} waited {elapsed} s: {message}"


# ---------------------------------------------------------------- torchrun

@pytest.mark.multiproc
def test_torchrun_gives_each_rank_its_local_device_from_init_process_group(tmp_path):
    # keep the caller's PYTHONPATH after ours: it may name the torchferry under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
         "127.0.0.1", "--master-port", str(free_port()), str(HERE), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.read_text() for p in tmp_path.glob("*.txt")) == ["0 neuron:0 3.0", "1 neuron:1 3.0"]


def _torchrun_main(out: str) -> None:
    import torch.distributed as dist

    import torchferry.device

    torchferry.device.enable()
    rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("neuron")  # selects neuron:LOCAL_RANK, as TorchNeuron's backend does: no set_device
    device = torch.device("neuron", torch.neuron.current_device())
    t = torch.full((2,), float(rank + 1), device=device)
    dist.all_reduce(t)
    Path(out, f"{rank}.txt").write_text(f"{rank} {t.device} {t.cpu()[0].item()}")
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()


if __name__ == "__main__":
    _torchrun_main(sys.argv[1])
