"""What one coverage row predicts for the real target, read around one mode in the worker.

A row that passes on torchferry's built-in device says little by itself: every op runs on the
CPU's kernels there. What a team needs to know is what the same mode would cost on
TorchNeuron, and the built-in device predicts it from its device profile
(torchferry.device.target, docs/device/fidelity.md):

- the ops that would fall back to the host, with their share of the mode's op calls;
- the eager op signatures the mode adds (each a NEFF compilation on a cold cache);
- the host syncs (the host waiting for a device value: ``item()``, data-dependent output sizes,
  boolean masks, ...), by cause; device-to-host copies are left out, because the harness itself
  copies every result it compares to the host;
- the known issues: ops of the mode that TorchNeuron's own CI skips, with the vendor's reason and
  file (``torchferry.device.known_issues()``), a kind of prediction of their own that leaves the
  row's category alone (the vendor's skip is evidence about the op, not a failure of this row);
- with ``--compile``: the graphs Dynamo captured, the graph breaks with the reasons and places
  Dynamo's ``explain`` gives (``torch._dynamo.utils.graph_break_reasons``, the records explain
  reads, plus the break counter for breaks that leave no record), and whether the mode compiled
  without a break, which is what ``torch.compile(fullgraph=True)`` requires.

The break figures come from the compilation the mode already runs, so they cost no second
trace. On another device only what it reports itself is filled in (its fallback counters when
it has them, the compile figures); the rest stays None, never an invented figure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torchferry.coverage.results import short_path
from torchferry.harness.devices import emulates

# the sync cause of a device-to-host copy (torchferry.device.target.host_syncs): the harness's own reads
HOST_COPY = "(device to host)"


class Watch:
    """Marks taken before one mode runs; ``fields`` reads the figures after it.

    Create it right after ``Counters.reset()`` (which clears the op and sync counts), so that
    every figure covers this mode alone.
    """

    def __init__(self, device: Any, backend: str | None) -> None:
        self.profile = emulates(device)  # the emulated profile: its figures are predictions, not measurements
        self.backend = backend
        if self.profile:
            from torchferry.device.target import eager_compiles

            self.compiles = eager_compiles()
        if backend:
            from torch._dynamo.utils import counters, graph_break_reasons

            self.graphs0 = graph_count()
            self.breaks0 = list(graph_break_reasons)  # kept alive, so that their ids stay theirs
            self.counted0 = dict(counters["graph_break"])

    def fields(self, counters: Any) -> dict:
        """The row's prediction fields (torchferry.report.coverage.Row) for the mode just run."""
        out: dict[str, Any] = {"profile": self.profile}
        ops = counters.ops()
        if ops:
            calls = int(ops["executed_total"])
            out.update(op_calls=calls, fallback_share=round(sum(ops["fallback"].values()) / calls, 6) if calls else 0.0)
        if self.profile:
            from torchferry.device.target import eager_compiles, host_syncs, known_issues

            out.update(eager_signatures=eager_compiles().since(self.compiles).signatures,
                       host_syncs={k: n for k, n in host_syncs().items() if not k.endswith(HOST_COPY)},
                       known_issues=[{k: issue[k] for k in ("op", "kind", "calls", "reason", "source")}
                                     for issue in known_issues()])
        if self.backend:
            out.update(self._compiled())
        return out

    def _compiled(self) -> dict:
        from torch._dynamo.utils import counters, graph_break_reasons

        seen = {id(r) for r in self.breaks0}
        places: Counter[tuple[str, str]] = Counter()
        for r in graph_break_reasons:
            if id(r) not in seen:
                frame = r.user_stack[-1] if r.user_stack else None
                where = f"{short_path(frame.filename)}:{frame.lineno} in {frame.name}" if frame else ""
                places[(_first_line(r.reason), where)] += 1
        recorded = {reason for reason, _ in places}
        for reason, n in counters["graph_break"].items():  # breaks Dynamo counted without a compile record
            new = n - self.counted0.get(reason, 0)
            if new > 0 and _first_line(reason) not in recorded:
                places[(_first_line(reason), "")] += new
        graphs = graph_count() - self.graphs0
        reasons = [{"reason": reason, "where": where, "count": n}
                   for (reason, where), n in sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))]
        return {"graphs": graphs, "graph_breaks": len(reasons), "break_reasons": reasons,
                "fullgraph": not reasons if graphs else None}


def graph_count() -> int:
    """Graphs Dynamo has compiled in this process so far (its ``unique_graphs`` counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def recompiles(graphs: int, first_signature_graphs: int, signatures: int) -> bool:
    """Whether a compiled forward recompiled beyond what its input signatures explain.

    The first signature compiles one graph per frame (a graph break adds a frame); each later
    signature of the coverage forward (another sequence length) may compile each of those once
    more, with the dimension dynamic. More graphs than ``signatures`` times the first
    signature's is a recompilation; graph breaks alone are not (they show in ``fullgraph``).
    """
    return graphs > signatures * max(first_signature_graphs, 1)


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0][:240]
