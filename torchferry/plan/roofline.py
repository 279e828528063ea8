"""Time and cost bounds of one traced step on an instance's peak figures (the price table).

Per rank: compute time = FLOPs / peak FLOP/s of one accelerator for the compute dtype; collective
time = bytes each rank puts on the wire (ring algorithms) / the link bandwidth of one accelerator.
No step can be shorter than the longer of the two (they overlap perfectly at best), so that is
the lower bound. The HBM time of the traced op traffic is shown beside it, not in the bound: the
trace counts every op's inputs and outputs, and a compiler that fuses ops moves fewer bytes.
Throughput and cost follow from the bound; a real run reaches a fraction of it (the utilisation).
"""

from __future__ import annotations

from torchferry.errors import UsageError
from torchferry.harness.prices import UTILISATIONS
from torchferry.workloads.footprint.parallelize import PRECISIONS
from torchferry.report.plan import Bounds, Layout, Peaks, StepTrace


def compute_dtype(precision: str) -> str:
    """The dtype the matmuls run in: FSDP2's param_dtype if it casts, else the storage dtype."""
    storage, param, _reduce, _ = PRECISIONS[precision]
    return param or storage


def peaks(table: dict, instance: str, dtype: str, need_links: bool = True) -> Peaks:
    """The per-accelerator peaks of ``instance``; a UsageError when the table lacks one the bound needs."""
    entry = table["instances"].get(instance)
    if entry is None:
        raise UsageError(f"instance {instance!r} is not in the price table. Valid: {', '.join(sorted(table['instances']))}; "
                         "add it with --prices FILE.")
    flops = entry.get("peak_flops", {}).get(dtype)
    if not flops:
        known = ", ".join(entry.get("peak_flops", {})) or "none"
        raise UsageError(f"the price table gives no peak {dtype} FLOP/s for {instance!r} (it knows: {known}); add "
                         f"peak_flops = {{ {dtype} = ... }} with its source to a --prices FILE, or choose another precision.")
    if need_links and not entry.get("link_bandwidth"):
        raise UsageError(f"the price table gives no link_bandwidth for {instance!r}, which the collective bound needs; "
                         "add link_bandwidth (bytes/s, instance total) with a peaks_source to a --prices FILE.")
    n = entry.get("accelerators", 1)
    per = lambda key: entry[key] / n if entry.get(key) else None  # noqa: E731
    sources = {"peaks": entry.get("peaks_source", "not given in the price table"),
               "price": f"${entry['price_per_hour']}/h, {entry.get('kind', 'on-demand')}, {entry.get('region', 'region n/a')}, "
                        f"{entry['date']}, {entry['source']}"}
    if entry.get("note"):
        sources["price_note"] = entry["note"]
    return Peaks(instance=instance, accelerators=n, flops=flops / n, hbm_bytes_per_s=per("hbm_bandwidth"),
                 link_bytes_per_s=per("link_bandwidth"), dtype=dtype, price_per_hour=entry["price_per_hour"],
                 price_kind=entry.get("kind", "on-demand"), sources=sources)


def _costs(step_s: float, tokens: int, ranks: int, p: Peaks) -> tuple[float, float, dict[str, float]]:
    tokens_per_s = tokens / step_s
    dollars_per_s = p.price_per_hour / p.accelerators * ranks / 3600
    cost = dollars_per_s / tokens_per_s * 1e6
    return tokens_per_s, cost, {f"{u:.0%}": cost / u for u in UTILISATIONS}


def target_bounds(trace: StepTrace, layout: Layout, p: Peaks) -> Bounds:
    """Bounds of the traced layout on the target instance: compute and collectives of one rank."""
    compute = trace.flops / p.flops
    wire = sum(c["wire_bytes"] for c in trace.collectives.values())
    collective = wire / p.link_bytes_per_s if p.link_bytes_per_s else None
    hbm = trace.op_bytes / p.hbm_bytes_per_s if p.hbm_bytes_per_s else None
    step = max(compute, collective or 0.0)
    tokens_per_s, cost, at = _costs(step, layout.tokens_per_step, layout.world, p)
    return Bounds(instance=p.instance, compute_s=compute, collective_s=collective, hbm_unfused_s=hbm, step_lower_s=step,
                  limited_by="compute" if compute >= (collective or 0.0) else "collectives", tokens_per_s_upper=tokens_per_s,
                  cost_per_1m_tokens_lower=cost, cost_at_utilisation=at,
                  scope=f"{layout.world} ranks; per-rank FLOPs and ring-collective bytes of the traced step")


def reference_bounds(trace: StepTrace, layout: Layout, p: Peaks) -> Bounds:
    """The same work on a reference instance: the step's FLOPs over all ranks at its peak, compute only
    (its own layout, collectives and memory fit are not traced)."""
    total_flops = trace.flops * layout.world
    compute = total_flops / (p.flops * p.accelerators)  # one whole instance
    tokens_per_s, cost, at = _costs(compute, layout.tokens_per_step, p.accelerators, p)
    return Bounds(instance=p.instance, compute_s=compute, collective_s=None, hbm_unfused_s=None, step_lower_s=compute,
                  limited_by="compute", tokens_per_s_upper=tokens_per_s, cost_per_1m_tokens_lower=cost,
                  cost_at_utilisation=at,
                  scope=f"one {p.instance} ({p.accelerators} accelerators) doing the step's {total_flops:.3g} FLOPs; "
                        "compute only: collectives and memory fit not modelled")
