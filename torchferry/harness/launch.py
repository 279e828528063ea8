"""Multi-process ranks through PyTorch's own launcher, ``torch.distributed.run`` (elastic launch).

The runner starts one launcher on this node with a static rendezvous at ``--rdzv-endpoint``
(this node is node 0, so its ranks are 0..nproc-1 and rank 0, the one that speaks for the
group, is here). Other nodes join with the command ``other_node_command`` prints. The
launcher stops every rank when one fails and prints each rank's exit code; ``exit_codes``
reads them back from its log. On the rank's side, ``join_group`` joins the group the launcher set up and
``leave_group`` leaves it.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

MONITOR_INTERVAL_S = "0.1"  # how often the launcher checks its ranks (a dead rank stops the others this fast)
# A failed rank stays alive this long after reporting: its launcher would otherwise stop every other rank at
# once, and the runner could no longer tell a peer that hangs from one that was stopped (it waits 10 s).
FAILED_RANK_WAIT_S = 60.0
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a one-node rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launcher_args(nproc: int, nnodes: int, endpoint: str | None, node_rank: int = 0) -> list[str]:
    """``python -m torch.distributed.run`` with the rendezvous options (a free local port on one node)."""
    endpoint = endpoint or f"127.0.0.1:{free_port()}"
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--nnodes", str(nnodes),
            "--node-rank", str(node_rank), "--rdzv-backend", "static", "--rdzv-endpoint", endpoint,
            "--max-restarts", "0", "--monitor-interval", MONITOR_INTERVAL_S]


def other_node_command(nproc: int, nnodes: int, endpoint: str, module: str, job: Path) -> str:
    """What to run on node K (1..nnodes-1) to join this run (the job file must be readable there)."""
    args = launcher_args(nproc, nnodes, endpoint, node_rank=0)
    args[args.index("--node-rank") + 1] = "K"
    return " ".join(["python", *args[1:], "-m", module, str(job)])


def exit_codes(log: Path) -> tuple[dict[int, int], int | None]:
    """Each failed rank's exit code from the launcher's summary, and the rank it names as the root cause."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return {}, None
    codes: dict[int, int] = {}
    for rank, code in _FAILURE.findall(text):
        codes[int(rank)] = int(code)
    root = text.split("Root Cause (first observed failure):", 1)
    cause = _FAILURE.search(root[1]) if len(root) == 2 else None
    return codes, int(cause.group(1)) if cause else None


def join_group(device: Any, timeout_s: float) -> tuple[Any, str]:
    """This rank's device (index ``LOCAL_RANK`` when the device has several) in a process group of the device's own
    default backend, from the launcher's environment (``env://``); returns (device, backend)."""
    import datetime

    import torch
    import torch.distributed as dist

    from torchferry.harness import devices

    module = devices.device_module(device)
    count = module.device_count() if hasattr(module, "device_count") else 1
    if device.index is None and count > 1:
        device = torch.device(device.type, int(os.environ["LOCAL_RANK"]) % count)
        if hasattr(module, "set_device"):
            module.set_device(device)
    backend = dist.get_default_backend_for_device(device.type)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return device, backend


def leave_group() -> None:
    """Leave the default process group once every rank's collectives are finished.

    The barrier comes first because ``destroy_process_group`` does not stop gloo's worker threads while
    something (FSDP's mesh, DDP) still holds the group (PyTorch 2.13): a worker that drops a finished
    collective's tensors during interpreter shutdown cannot take the GIL and calls std::terminate, and the
    rank exits with SIGABRT after its work is done. The barrier's wait releases the GIL, so the workers
    finish that clean-up first. Measured with examples/train_fsdp2.py under torchrun on 2 cores: 6 aborts
    in 143 runs without the barrier, none in 120 with it.
    """
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
