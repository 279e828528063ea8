"""The `neuron` process-group backend of the built-in device.

TorchNeuron registers a process-group backend named "neuron" (contract §6); scripts
call `init_process_group("neuron")` and pass `neuron` tensors to every collective.
The built-in device's memory is host memory, so each collective here runs over an
existing transport (gloo) on zero-copy host views of the device tensors: gloo reads
and writes the device's bytes in place, and no device memory is copied.

PyTorch lets a Python backend only subclass `ProcessGroup` (a Python `Backend` has no
trampoline), so `NeuronProcessGroup` is the whole group: it also serves CPU tensors
(their host view is themselves), which is what makes mixed specs such as
`"cpu:gloo,neuron:neuron"` work. C++ callers (DDP's reducer, functional collectives,
DTensor) reach the same Python methods through PyTorch's ProcessGroup trampoline.

TorchNeuron's group refuses what gloo accepts in a few places (no send/recv, all_to_all split
sizes and group sizes, barrier on subgroups, reduce ops, empty tensors): each collective checks
those first (`distributed_rules`, the profile's `pg_*` rules), as TorchNeuron does.

Faults: every rank publishes a heartbeat (its last collective) to the rendezvous store
once a second; when a collective fails or outlives `TORCHFERRY_COLLECTIVE_TIMEOUT`, the
error names the collective and the ranks that died or never arrived.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

from torchferry.device import _runtime
from torchferry.device import distributed_rules as rules
from torchferry.errors import UsageError

BACKEND_NAME = "neuron"
TIMEOUT_VARIABLE = "TORCHFERRY_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = timedelta(seconds=300)
_HEARTBEAT_S = 1.0
# (stop event, thread) of every heartbeat in this process, stopped at exit: a daemon
# thread killed inside a store call during interpreter shutdown aborts the process.
_HEARTBEATS: list[tuple[threading.Event, threading.Thread]] = []


def _stop_heartbeats() -> None:
    for stop, _ in _HEARTBEATS:
        stop.set()
    for _, thread in _HEARTBEATS:
        thread.join(timeout=5.0)
    _HEARTBEATS.clear()


class CollectiveError(RuntimeError):
    """A collective of the `neuron` process group failed or timed out on this rank."""


def collective_timeout(environ: Any, pg_timeout: timedelta | None) -> timedelta:
    """How long a collective may wait for its peers.

    `TORCHFERRY_COLLECTIVE_TIMEOUT` (seconds) wins; otherwise the timeout given to
    `init_process_group`, except PyTorch's 30-minute default, which becomes 300 s so
    that a dead rank fails a test run in minutes, not half an hour.
    """
    text = environ.get(TIMEOUT_VARIABLE, "").strip()
    if text:
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if seconds <= 0:
            raise UsageError(
                f"{TIMEOUT_VARIABLE}={text!r} is not a positive number of seconds. Set it to how "
                f"long a collective may wait for the other ranks, e.g. {TIMEOUT_VARIABLE}=60, "
                "or unset it for the init_process_group timeout (300 s by default)."
            )
        return timedelta(seconds=seconds)
    if pg_timeout is None or pg_timeout == dist.constants.default_pg_timeout:
        return DEFAULT_TIMEOUT
    return pg_timeout


def _host(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor over `tensor`'s bytes (no copy); CPU tensors are their own view."""
    if tensor.device.type == BACKEND_NAME:
        return _runtime.core()._host_view(tensor)
    return tensor


def _hosts(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [_host(t) for t in tensors]


class _Work(dist.Work):
    """The gloo work of one collective, answering with the caller's device tensors.

    `result()` and `get_future()` return the neuron tensors (DDP's reducer builds its
    gradient views from the future's value); `wait()` turns a gloo failure into a
    CollectiveError that names the collective and the ranks at fault.
    """

    def __init__(self, inner: list[Any], outputs: list[torch.Tensor], group: NeuronProcessGroup,
                 collective: str, seq: int) -> None:
        super().__init__()
        self._inner = inner  # gloo works; several for a coalesced collective
        self._outputs = outputs
        self._group = group
        self._collective = collective
        self._seq = seq

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        try:
            for work in self._inner:
                work.wait()
        except Exception as exc:  # gloo raises RuntimeError/DistBackendError
            raise self._group._failure(self._collective, self._seq, exc) from exc
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._inner)

    def is_success(self) -> bool:
        return all(work.is_success() for work in self._inner)

    def exception(self) -> Any:
        return next((work.exception() for work in self._inner if work.exception()), None)

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        devices = sorted({str(t.device) for t in self._outputs if t.device.type != "cpu"})
        future: torch.futures.Future = torch.futures.Future(devices=devices)
        group, collective, seq, outputs = self._group, self._collective, self._seq, self._outputs

        def done(inner: torch.futures.Future) -> None:
            try:
                for each in inner.wait():
                    each.wait()
            except Exception as exc:
                future.set_exception(group._failure(collective, seq, exc))
                return
            future.set_result(outputs)

        torch.futures.collect_all([work.get_future() for work in self._inner]).add_done_callback(done)
        # A Python `set_exception` stores the exception as the future's *value* (only
        # Python's `wait()` raises it), so C++ readers such as DDP's reducer would take it
        # for a result and crash. Re-raising it inside `then` gives the returned future a
        # real error that C++ `value()` rethrows.
        return future.then(lambda completed: completed.value())


class NeuronProcessGroup(dist.ProcessGroup):
    """Process group of the `neuron` backend: gloo on zero-copy host views."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._timeout = timeout
        self._store = store
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        # The C++ side keeps the group's name on its backends (functional collectives
        # resolve groups by name), so the gloo backend is registered for CPU tensors.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._seq = 0
        self._last = "init"
        self._stop = threading.Event()
        self._beat()
        self._heartbeat = threading.Thread(
            target=self._beat_forever, name=f"neuron-pg-heartbeat-{rank}", daemon=True
        )
        self._heartbeat.start()
        _HEARTBEATS.append((self._stop, self._heartbeat))

    # ---- identity -------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - the C++ virtual's name
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"NeuronProcessGroup(rank={self._rank}, size={self._size}, over=gloo)"

    # ---- faults ---------------------------------------------------------------------
    def _beat(self) -> None:
        self._store.set(f"heartbeat/{self._rank}", f"{time.time()} {self._seq} {self._last}")

    def _beat_forever(self) -> None:
        while not self._stop.wait(_HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # the store's host (rank 0) has gone; nothing left to tell
                return

    def _failure(self, collective: str, seq: int, exc: BaseException) -> CollectiveError:
        """A CollectiveError naming this collective and, from the heartbeats, the ranks at fault."""
        return CollectiveError(
            f"neuron process group: {collective} (collective #{seq}) failed on rank "
            f"{self._rank} of {self._size} after at most {self._timeout.total_seconds():g} s: "
            f"{self._suspects(seq)}. Transport error: {str(exc).strip().splitlines()[0]}. Next "
            f"step: read rank logs of the ranks named above; raise {TIMEOUT_VARIABLE} if the "
            "ranks are only slow."
        )

    def _suspects(self, seq: int) -> str:
        now = time.time()
        stale = max(5 * _HEARTBEAT_S, 3.0)
        notes = []
        try:
            for peer in range(self._size):
                if peer == self._rank:
                    continue
                key = f"heartbeat/{peer}"
                if not self._store.check([key]):
                    notes.append(f"rank {peer} never joined")
                    continue
                stamp, peer_seq, last = self._store.get(key).decode().split(" ", 2)
                age = now - float(stamp)
                if age > stale:
                    notes.append(
                        f"rank {peer} stopped responding {age:.0f} s ago (died or is stuck "
                        f"holding the interpreter) after collective #{peer_seq} ({last})"
                    )
                elif int(peer_seq) < seq:
                    notes.append(
                        f"rank {peer} is alive but has not entered this collective (it is at "
                        f"#{peer_seq}, {last})"
                    )
        except Exception:
            return ("the rendezvous store hosted by rank 0 is unreachable, so rank 0 has "
                    "probably exited")
        return "; ".join(notes) if notes else "no peer is behind; the transport itself failed"

    def shutdown(self) -> None:
        """destroy_process_group's call: stop the heartbeat now, not at interpreter exit, where
        killing it inside a store call aborts the process, and shut gloo down. (Gloo's worker
        threads end only when the group itself is released, as with PyTorch's own gloo group.)"""
        self._stop.set()
        if self._heartbeat.is_alive():
            self._heartbeat.join(timeout=5.0)
        self._gloo.shutdown()

    def abort(self) -> None:
        self._stop.set()
        self._gloo.abort()

    # ---- the collectives ------------------------------------------------------------
    def _run(self, collective: str, outputs: list[torch.Tensor], start: Callable[[], Any]) -> _Work:
        """Start one collective (`start` returns a gloo work or a list of them) and wrap it."""
        rules.check_real(collective, outputs)
        self._seq += 1
        self._last = collective
        try:
            inner = start()
        except Exception as exc:
            raise self._failure(collective, self._seq, exc) from exc
        return _Work(inner if isinstance(inner, list) else [inner], outputs, self, collective,
                     self._seq)

    def _ranks(self) -> list[int]:
        return dist.get_process_group_ranks(self)

    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        rules.check_reduce_op("all_reduce", opts.reduceOp)
        rules.check_not_empty("all_reduce", tensors)
        return self._run("all_reduce", tensors, lambda: self._gloo.allreduce(_hosts(tensors), opts))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        rules.check_reduce_op("all_reduce", opts.reduceOp)  # empty tensors are skipped there
        return self._run("all_reduce_coalesced", tensors,
                         lambda: self._gloo.allreduce_coalesced(_hosts(tensors), opts))

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        return self._run("broadcast", tensors, lambda: self._gloo.broadcast(_hosts(tensors), opts))

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        rules.check_reduce_op("all_reduce", opts.reduceOp)  # TorchNeuron's reduce is an all_reduce
        rules.check_not_empty("all_reduce", tensors)
        return self._run("reduce", tensors, lambda: self._gloo.reduce(_hosts(tensors), opts))

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        rules.check_all_gather_list([*inputs, *output_lists[0]])
        return self._run(
            "all_gather", [t for out in output_lists for t in out],
            lambda: self._gloo.allgather([_hosts(out) for out in output_lists], _hosts(inputs), opts),
        )

    def all_gather_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        rules.check_not_empty("all_gather", [input, output], first_dim=True)
        return self._run("all_gather_into_tensor", [output],
                         lambda: self._gloo._allgather_base(_host(output), _host(input), opts))

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run(
            "all_gather_coalesced", [t for out in output_lists for t in out],
            lambda: self._gloo.allgather_coalesced(
                [_hosts(out) for out in output_lists], _hosts(inputs), opts),
        )

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run("all_gather_into_tensor_coalesced", outputs,
                         lambda: [self._gloo._allgather_base(_host(out), _host(inp), opts)
                                  for out, inp in zip(outputs, inputs, strict=True)])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        rules.check_reduce_op("reduce_scatter", opts.reduceOp)
        rules.check_not_empty("reduce_scatter", [*input_lists[0], *outputs])
        return self._run(
            "reduce_scatter", outputs,
            lambda: self._gloo.reduce_scatter(_hosts(outputs), [_hosts(i) for i in input_lists], opts),
        )

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        rules.check_reduce_op("reduce_scatter", opts.reduceOp)
        rules.check_not_empty("reduce_scatter", [input, output])
        return self._run("reduce_scatter_tensor", [output],
                         lambda: self._gloo._reduce_scatter_base(_host(output), _host(input), opts))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        rules.check_reduce_op("reduce_scatter", opts.reduceOp)  # empty tensors are skipped there
        return self._run("reduce_scatter_tensor_coalesced", outputs,
                         lambda: [self._gloo._reduce_scatter_base(_host(out), _host(inp), opts)
                                  for out, inp in zip(outputs, inputs, strict=True)])

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        ranks = self._ranks()
        rules.check_all_to_all_splits(output_splits, input_splits, len(ranks))
        # TorchNeuron then splits the input into one chunk per rank and runs its all_to_all on them.
        chunk = list(input_splits) if input_splits else max(input.shape[0] // len(ranks), 1)
        rules.check_all_to_all(ranks, dist.get_world_size(), list(torch.split(input, chunk)))
        return self._run("all_to_all_single", [output],
                         lambda: self._gloo.alltoall_base(
                             _host(output), _host(input), output_splits, input_splits, opts))

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        rules.check_all_to_all(self._ranks(), dist.get_world_size(), inputs)
        return self._run("all_to_all", outputs,
                         lambda: self._gloo.alltoall(_hosts(outputs), _hosts(inputs), opts))

    def gather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        return self._run(
            "gather", [t for out in output_lists for t in out],
            lambda: self._gloo.gather([_hosts(out) for out in output_lists], _hosts(inputs), opts),
        )

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        return self._run(
            "scatter", outputs,
            lambda: self._gloo.scatter(_hosts(outputs), [_hosts(i) for i in input_lists], opts),
        )

    def send(self, tensors, dst, tag=0):
        rules.check_point_to_point("send")
        return self._run("send", tensors, lambda: self._gloo.send(_hosts(tensors), dst, tag))

    def recv(self, tensors, src, tag=0):
        rules.check_point_to_point("recv")
        return self._run("recv", tensors, lambda: self._gloo.recv(_hosts(tensors), src, tag))

    def recv_anysource(self, tensors, tag=0):
        rules.check_unimplemented("recv_anysource")
        return self._run("recv", tensors, lambda: self._gloo.recv_anysource(_hosts(tensors), tag))

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        rules.check_barrier(self, self._size)
        return self._run("barrier", [], lambda: self._gloo.barrier(opts))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        rules.check_unimplemented("monitored_barrier")
        return self._gloo.monitored_barrier(timeout or self._timeout, wait_all_ranks)


def select_local_device(environ: Any) -> int | None:
    """Make `neuron:LOCAL_RANK` this process's current device, as TorchNeuron's `init_process_group` does.

    TorchNeuron's backend setup (`torch_neuronx/distributed/backend.py`, `_neuron_runtime_setup`) sets the
    local device start index to LOCAL_RANK, which makes it the process's current device for every thread
    (`torch_neuronx/csrc/core/NeuronDevice.cpp`, `set_local_device_start_index`: "PyTorch Device ID will always
    be equal to the local rank"); `device_count()` is then the local world size. So libraries that read
    `torch.neuron.current_device()` after `init_process_group` (accelerate's `PartialState.set_device`) put each
    rank on its own core with the script unchanged. A launcher that pins one core per process
    (`NEURON_RT_VISIBLE_CORES`, one device seen) keeps `neuron:0`. Returns the index chosen (None: unchanged).
    """
    local_rank = environ.get("LOCAL_RANK")
    if local_rank is None or not local_rank.strip().isdigit():
        return None
    index = int(local_rank)
    core = _runtime.core()
    if index >= core._device_count():
        return None
    core._set_device(index)
    return index


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> NeuronProcessGroup:
    select_local_device(os.environ)
    return NeuronProcessGroup(store, rank, size, collective_timeout(os.environ, timeout))


def register() -> None:
    """Register the `neuron` backend with torch.distributed (idempotent; called by enable())."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        atexit.register(_stop_heartbeats)
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=[BACKEND_NAME])
    # register_backend keeps a device's earlier default; the device's own backend must win.
    dist.Backend.default_device_backend_map[BACKEND_NAME] = BACKEND_NAME
