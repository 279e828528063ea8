"""What one coverage row predicts for the real target, read around one mode in the worker.

A row that passes on torchferry's built-in device says little by itself: every op runs on the
CPU's kernels there. What a team needs to know is what the same mode would cost on
TorchNeuron, and the built-in device predicts it from its device profile (docs/device/fidelity.md);
the harness's measurement window (torchferry.harness.window) reads it around each mode:

- the ops that would fall back to the host, with their share of the mode's op calls;
- the eager op signatures the mode adds (each a NEFF compilation on a cold cache);
- the host syncs (the host waiting for a device value: ``item()``, data-dependent output sizes,
  boolean masks, ...), by cause; device-to-host copies are left out, because the harness itself
  copies every result it compares to the host;
- with ``--compile``: the graphs Dynamo captured, the graph breaks with the reasons and places
  Dynamo's ``explain`` gives (``torch._dynamo.utils.graph_break_reasons``, the records explain
  reads, plus the break counter for breaks that leave no record), and whether the mode compiled
  without a break, which is what ``torch.compile(fullgraph=True)`` requires.

The break figures come from the compilation the mode already runs, so they cost no second
trace. On another device only what it reports itself is filled in (its fallback counters when
it has them, the compile figures); the rest stays None, never an invented figure.
"""

from __future__ import annotations

from typing import Any

from torchferry.harness.window import Reading


def fields(reading: Reading) -> dict[str, Any]:
    """The row's prediction fields (torchferry.report.coverage.Row) from the window around one mode.

    Host syncs leave out device-to-host copies: the harness itself copies every result it compares."""
    p, c = reading.predictions, reading.compiled
    out: dict[str, Any] = {"profile": p.profile if p else None}
    if reading.ops is not None:
        out.update(op_calls=reading.ops.executed, fallback_share=reading.ops.fallback_share)
    if p:
        out.update(eager_signatures=p.signatures, host_syncs=p.syncs_beyond_copies())
        if p.known_issues is not None:  # the vendor's known issues, where the device lists them
            out.update(known_issues=[{k: i.get(k) for k in ("op", "kind", "calls", "reason", "source")}
                                     for i in p.known_issues])
    if c:
        out.update(graphs=c.graphs, graph_breaks=len(c.breaks), fullgraph=c.fullgraph,
                   break_reasons=[{"reason": b.reason, "where": b.where, "count": b.count} for b in c.breaks])
    return out


def recompiles(graphs: int, first_signature_graphs: int, signatures: int) -> bool:
    """Whether a compiled forward recompiled beyond what its input signatures explain.

    The first signature compiles one graph per frame (a graph break adds a frame); each later
    signature of the coverage forward (another sequence length) may compile each of those once
    more, with the dimension dynamic. More graphs than ``signatures`` times the first
    signature's is a recompilation; graph breaks alone are not (they show in ``fullgraph``).
    """
    return graphs > signatures * max(first_signature_graphs, 1)
