"""One measurement window: open it before a span of work, read it after.

Every measuring command reads a device the same way through this window: `ferry check`'s
workers, `ferry coverage`'s rows, and the recorders the unchanged-script check installs in the
user's own processes. What it reads, all of it for the span alone:

- ``ops``: op calls and the host-fallback ops among them, where the device tracks ops
  (``get_executed_ops``/``get_fallback_ops`` of its device module), else None;
- ``memory``: the peak memory (the device allocator's ``max_memory_allocated``, else the host
  process's RSS peak, with its source named);
- ``compiled`` (when a compile backend is named): Dynamo's graphs, recompilations and graph
  breaks (with the user's line each break happened on, where Dynamo kept a record), and the
  device backend's own per-graph records where it keeps them;
- ``predictions``, only on a device that emulates another (its properties'
  ``is_host_emulation``): what the emulated target would do with the same work, eager op
  signatures (one compilation each on a cold cache), host syncs by cause, why each
  fallback op falls back, the numerics in force and the vendor's known issues the span ran into.

It reads only through the registered device module (``torch.get_device_module``) and the
documented ``torchferry.device`` functions (docs/device/fidelity.md), never a device's internals,
and it never invents a figure: what a device does not report stays None (or empty).

Usage::

    window = Window(device, compile_backend="neuron")   # opens: marks every counter
    ...                                                  # the work
    reading = window.read()                              # a frozen Reading; reading.to_dict() is JSON

or ``with Window(device) as window: ...`` and then ``window.reading``. ``clear=True`` (the
harness's own workers) also clears the device's counters and its peak-memory mark when the window
opens; ``clear=False`` (inside a user's process) leaves them as the user set them, reads every
count as a difference from the opening marks, and the peak memory is then the peak since the
last reset the user (or nobody) made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from torchferry.harness.devices import Memory, emulates, peak_memory
from torchferry.records import Record

# the host-sync cause of a device-to-host copy (torchferry.device.host_syncs): a harness that
# compares results copies every one of them to the host itself, so it sets these apart
HOST_COPY = "(device to host)"
# the documented torchferry function with the built-in device's compile metrics (per graph the cache
# outcome, input signature, kind and compile id besides TorchNeuron's fields), tried first; a device
# module's own `get_dynamo_metrics()` is the fallback (a dict with "graphs", or TorchNeuron's list of records)
COMPILE_METRICS_API = "compile_metrics"
# the documented torchferry function with the vendor's known issues among the ops run since the last
# clear_op_tracking(): one record per op (op, kind, reason, scope, source, calls, ...)
KNOWN_ISSUES_API = "known_issues"


@dataclass(frozen=True)
class Ops(Record):
    """Op calls in the window: all of them, and those that ran on the host (op -> calls)."""

    executed: int
    fallback: Mapping[str, int]

    @property
    def fallback_calls(self) -> int:
        return sum(self.fallback.values())

    @property
    def fallback_share(self) -> float:
        """The host-fallback calls' share of all op calls (0.0 when nothing ran)."""
        return round(self.fallback_calls / self.executed, 6) if self.executed else 0.0


@dataclass(frozen=True)
class GraphBreak(Record):
    """One graph-break reason (its first line) at one place in the user's code (``file:line in
    function``; "" when Dynamo counted the break without a record), and how often it happened."""

    reason: str
    where: str
    count: int


@dataclass(frozen=True)
class Compiled(Record):
    """What ``torch.compile`` did in the window.

    graphs: graphs Dynamo compiled; recompilations: Dynamo's recompile counter; breaks: the graph
    breaks by reason and place, most frequent first; counted_breaks: Dynamo's break counter by full
    reason (which also counts breaks that leave no record); device_graphs: the compile backend's
    records, one per compiled graph (None when the device's backend keeps none).
    """

    backend: str
    graphs: int
    recompilations: int
    breaks: tuple[GraphBreak, ...]
    counted_breaks: Mapping[str, int]
    device_graphs: tuple[Mapping[str, Any], ...] | None

    @property
    def break_count(self) -> int:
        """Graph breaks Dynamo counted."""
        return sum(self.counted_breaks.values())

    @property
    def fullgraph(self) -> bool | None:
        """Whether everything compiled without a break (what ``fullgraph=True`` requires); None when nothing compiled."""
        return not self.breaks if self.graphs else None


@dataclass(frozen=True)
class Predictions(Record):
    """What the emulated target would do with the window's work (an emulating device only).

    profile: the emulated device profile; capacity_bytes: its device memory; numerics: "target"
    (64-bit values at the target's 32 bits) or "host"; signatures/compilations/cache_hits/calls:
    the eager-mode compilation counts (new op signatures, those the persistent cache lacked, those
    it had, op calls that ran a compiled program); host_syncs: the host waiting for a device value,
    by cause, device-to-host copies included (``HOST_COPY``); fallback_reasons: why each fallback
    op of the window runs on the host, and why each op that synced does (one_hot reads its indices' range); known_issues: the vendor's known issues among the window's ops,
    one record each as the device reports it (``calls`` counted in the window), None where the device
    keeps no such list.
    """

    profile: str
    capacity_bytes: int | None
    numerics: str | None
    signatures: int
    compilations: int
    cache_hits: int
    calls: int
    host_syncs: Mapping[str, int]
    fallback_reasons: Mapping[str, str]
    known_issues: tuple[Mapping[str, Any], ...] | None = None

    def syncs_beyond_copies(self) -> dict[str, int]:
        """The host syncs other than device-to-host copies: those a comparing harness did not cause itself."""
        return {cause: n for cause, n in self.host_syncs.items() if not cause.endswith(HOST_COPY)}


@dataclass(frozen=True)
class Counts:
    """The counters a window can difference cheaply (a few dict copies, no memory or compile state): op
    calls, host fallbacks and, on an emulating device, eager compilations and host syncs. For hot paths
    that read every step, such as the unchanged-script recorder; ``Window.read`` gives the full reading."""

    executed: int
    fallback: Mapping[str, int]
    signatures: int
    compilations: int
    cache_hits: int
    host_syncs: Mapping[str, int]

    def minus(self, *others: Counts) -> Counts:
        """These counts less each of ``others`` (a span's counts less spans taken out of it)."""
        fallback, syncs = dict(self.fallback), dict(self.host_syncs)
        executed, signatures, compilations, hits = self.executed, self.signatures, self.compilations, self.cache_hits
        for o in others:
            executed, signatures = executed - o.executed, signatures - o.signatures
            compilations, hits = compilations - o.compilations, hits - o.cache_hits
            for k, n in o.fallback.items():
                fallback[k] = fallback.get(k, 0) - n
            for k, n in o.host_syncs.items():
                syncs[k] = syncs.get(k, 0) - n
        return Counts(executed, fallback, signatures, compilations, hits, syncs)


@dataclass(frozen=True)
class Reading(Record):
    """Everything one window measured. Its one JSON form is ``to_dict()``/``Reading.from_dict`` (torchferry.records):
    a worker hands its reading to its parent whole, and each result reads the fields it judges."""

    device: str
    ops: Ops | None
    memory: Memory
    compiled: Compiled | None
    predictions: Predictions | None


class Window:
    """Marks every counter of ``device`` when created; ``read()`` gives what changed since.

    ``compile_backend``: the ``torch.compile`` backend the work uses, if any (the compile figures
    are read only then); ``clear``: clear the device's op counters, peak-memory mark and compile
    records first (the harness's workers), or leave them alone (a user's process).
    """

    def __init__(self, device: Any, compile_backend: str | None = None, *, clear: bool = True) -> None:
        import torch

        self.device = device
        self.module = torch.get_device_module(device.type)
        self.backend = compile_backend
        self.reading: Reading | None = None
        self.profile = emulates(device)
        self.tracks_ops = all(callable(getattr(self.module, n, None))
                               for n in ("get_fallback_ops", "get_executed_ops", "clear_op_tracking"))
        if clear:
            if self.tracks_ops:
                self.module.clear_op_tracking()
            reset = getattr(self.module, "reset_peak_memory_stats", None)
            if callable(reset):
                reset()
            if compile_backend and callable(getattr(self.module, "reset_dynamo_metrics", None)):
                self.module.reset_dynamo_metrics()
        self._ops0 = self._op_counts()
        self._eager0 = self._api().eager_compiles() if self.profile else None
        self._syncs0 = self._api().host_syncs() if self.profile else {}
        self._issues0 = {i["op"]: i.get("calls", 0) for i in self._known_issues() or ()}
        if compile_backend:
            self._graphs0, self._recompiles0, self._counted0, self._breaks0 = 0, 0, {}, []
            if _dynamo_imported():  # else nothing has compiled yet: the counts start at 0, Dynamo stays unimported
                from torch._dynamo.utils import counters, graph_break_reasons

                self._graphs0 = dynamo_graphs()
                self._recompiles0 = _dynamo_recompiles()
                self._counted0 = dict(counters["graph_break"])
                self._breaks0 = list(graph_break_reasons)  # kept alive, so that their ids stay theirs
            self._records0 = len(compile_records(self.module) or ())

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reading = self.read()

    def read(self) -> Reading:
        """What the window measured so far (it stays open: a later read covers the span up to then)."""
        executed, fallback = self._op_counts() or (0, {})
        ops = None
        if self._ops0 is not None:
            ops = Ops(executed - self._ops0[0], _since(fallback, self._ops0[1]))
        return Reading(str(self.device), ops, peak_memory(self.device), self._compiled(), self._predictions(ops))

    def uncounted(self) -> contextlib.AbstractContextManager[None]:
        """The harness's own device work inside this context stays out of every counter this window reads (an
        emulating device's documented ``torchferry.device.uncounted``). A device without that API has no rehearsal to
        keep clean: there the work counts."""
        return self._api().uncounted() if self.profile else contextlib.nullcontext()

    def counts(self) -> Counts:
        """The cheap counters, cumulative since this process's last clear (difference two of them)."""
        executed, fallback = self._op_counts() or (0, {})
        if not self.profile:
            return Counts(executed, fallback, 0, 0, 0, {})
        api = self._api()
        eager = api.eager_compiles()
        return Counts(executed, fallback, eager.signatures, eager.compilations, eager.cache_hits, api.host_syncs())

    # -- the parts -------------------------------------------------------------------------
    def _op_counts(self) -> tuple[int, dict[str, int]] | None:
        if not self.tracks_ops:
            return None
        # an emulating device's one number (torchferry.device.executed_op_count) rather than the per-op table: the
        # script recorders read this window about 7 times a step, and the table cost 35 us of each read's 49
        executed = self._api().executed_op_count() if self.profile else sum(dict(self.module.get_executed_ops()).values())
        return executed, dict(self.module.get_fallback_ops())

    @staticmethod
    def _api() -> ModuleType:
        """The documented torchferry functions of an emulating device (docs/device/fidelity.md)."""
        import torchferry.device

        return torchferry.device

    def _predictions(self, ops: Ops | None) -> Predictions | None:
        if not self.profile:
            return None
        api = self._api()
        eager = api.eager_compiles().since(self._eager0)
        fallback_ops = set(ops.fallback) if ops is not None else set()
        syncs = _since(api.host_syncs(), self._syncs0)
        reasons = {op: why for op, why in api.fallback_reasons().items() if op in fallback_ops or op in syncs}
        known = self._known_issues()
        if known is not None:  # the records whose calls grew in the window, with the window's calls
            known = tuple({**i, "calls": i.get("calls", 0) - self._issues0.get(i["op"], 0)} for i in known
                          if i.get("calls", 0) > self._issues0.get(i["op"], 0))
        properties = self.module.get_device_properties(self.device)
        capacity = getattr(properties, "total_memory", None)
        return Predictions(
            profile=self.profile, capacity_bytes=int(capacity) if capacity is not None else None,
            numerics=api.numerics(), signatures=eager.signatures, compilations=eager.compilations,
            cache_hits=eager.cache_hits, calls=eager.calls, host_syncs=syncs, fallback_reasons=reasons, known_issues=known)

    def _known_issues(self) -> list[Mapping[str, Any]] | None:
        known = getattr(self._api(), KNOWN_ISSUES_API, None) if self.profile else None
        return [dict(i) for i in known()] if callable(known) else None

    def _compiled(self) -> Compiled | None:
        if not self.backend:
            return None
        records = compile_records(self.module)
        device_graphs = tuple(records[self._records0:]) if records is not None else None
        if not _dynamo_imported():  # a span that never compiled (an unchanged script that calls no torch.compile)
            return Compiled(self.backend, 0, 0, (), {}, device_graphs)
        from torch._dynamo.utils import counters, graph_break_reasons

        seen = {id(r) for r in self._breaks0}
        places: Counter[tuple[str, str]] = Counter()
        for record in graph_break_reasons:
            if id(record) not in seen:
                frame = record.user_stack[-1] if record.user_stack else None
                where = f"{short_path(frame.filename)}:{frame.lineno} in {frame.name}" if frame else ""
                places[(first_line(record.reason), where)] += 1
        counted = _since(dict(counters["graph_break"]), self._counted0)
        recorded = {reason for reason, _ in places}
        for reason, n in counted.items():  # breaks Dynamo counted without a compile record
            if first_line(reason) not in recorded:
                places[(first_line(reason), "")] += n
        breaks = tuple(GraphBreak(reason, where, n)
                       for (reason, where), n in sorted(places.items(), key=lambda kv: (-kv[1], kv[0])))
        return Compiled(self.backend, dynamo_graphs() - self._graphs0, _dynamo_recompiles() - self._recompiles0,
                        breaks, counted, device_graphs)


# -- reading a device ------------------------------------------------------------------------
def compile_records(module: Any) -> list[Mapping[str, Any]] | None:
    """The device compile backend's records, one per compiled graph since its last reset, or None when it keeps none.

    The documented torchferry function (``COMPILE_METRICS_API``, a dict with ``graphs``) when the device is
    torchferry's built-in one and has it; else the device module's ``get_dynamo_metrics()``: a dict with
    ``graphs`` (torchferry before that function), or a list of records (TorchNeuron's
    ``NeuronCompilationMetrics``), read as plain dicts.
    """
    api = sys.modules.get("torchferry.device")
    # torchferry's function describes its own device only: a window on another device (the CPU reference in
    # a process where the built-in device is also enabled) reads that device's module, never ours
    own_module = getattr(api, "is_enabled", lambda: False)() and module is getattr(sys.modules.get("torch"), api.DEVICE_NAME, None)
    ours = getattr(api, COMPILE_METRICS_API, None) if own_module else None
    metrics = ours if callable(ours) else getattr(module, "get_dynamo_metrics", None)
    if not callable(metrics):
        return None
    found = metrics()
    return [_as_dict(r) for r in (found.get("graphs", []) if isinstance(found, Mapping) else found)]


def _as_dict(record: Any) -> Mapping[str, Any]:
    if isinstance(record, Mapping):
        return dict(record)
    if dataclasses.is_dataclass(record):
        return dataclasses.asdict(record)
    return dict(vars(record))


def _dynamo_imported() -> bool:
    """Whether anything in this process has imported Dynamo (torch.compile does, at its first call)."""
    return "torch._dynamo" in sys.modules


def dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def _dynamo_recompiles() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["recompiles"].values())) if "recompiles" in counters else 0


def _since(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """The counts that grew since ``before``, by how much."""
    return {k: n - before.get(k, 0) for k, n in now.items() if n > before.get(k, 0)}


def short_path(filename: str) -> str:
    """A source path from its package down (``transformers/models/...``), the same on every machine."""
    path = filename.replace("\\", "/")
    for marker in ("site-packages/", "torchferry/", "lib/python"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def first_line(text: str) -> str:
    """The first line of a message, at most 240 characters."""
    return (str(text).strip().splitlines() or [""])[0][:240]
