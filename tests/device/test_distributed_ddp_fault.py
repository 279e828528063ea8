"""A DDP backward whose peer hangs raises a CollectiveError naming the rank; it does not crash.

DDP's reducer reads the process group's futures from C++; a Python-set exception used to look
like a result there and crash the rank (SIGSEGV in Reducer::finalize_backward)."""

import socket
import subprocess
import sys
import textwrap

import pytest

_RANK = textwrap.dedent(
    """
    import os, sys, time
    rank, port = int(sys.argv[1]), sys.argv[2]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, TORCHFERRY_COLLECTIVE_TIMEOUT="3",
                      NEURON_RT_NUM_CORES="2")
    import torch, torch.distributed as dist
    import torchferry.device; torchferry.device.enable()
    dist.init_process_group("neuron", rank=rank, world_size=2)
    device = torch.device("neuron", rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).to(device))
    if rank == 1:
        time.sleep(30)
        os._exit(0)
    try:
        model(torch.randn(2, 4, device=device)).sum().backward()
    except Exception as exc:
        print("raised", type(exc).__name__, str(exc), flush=True)
    os._exit(0)
    """
)


@pytest.mark.multiproc
def test_ddp_backward_with_a_hung_peer_raises_instead_of_crashing(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    peer = subprocess.Popen([sys.executable, str(script), "1", port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run([sys.executable, str(script), "0", port], capture_output=True, text=True, timeout=90)
    finally:
        peer.kill()
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert "raised" in done.stdout and "CollectiveError" in done.stdout
    assert "all_reduce" in done.stdout and "rank 1" in done.stdout
