"""Effective cost from the dated price table, with every assumption stated.

Measured, for a device that is the priced hardware: cost per 1M tokens (or 1k samples) =
price per accelerator-hour x accelerators used / (measured steady throughput x 3600) x unit,
and utilisation = achieved FLOP/s / the accelerators' peak for the run's dtype.

Projected, for the target: the FLOPs of one step (torch.utils.flop_counter.FlopCounterMode on
the reference, matmul/conv-class ops) over the units it processes give the FLOPs per unit; the
instance's peak gives the roofline lower bound of the step time, and at stated fractions of
the peak (``UTILISATIONS``) the throughput and the cost per unit. When the reference is priced,
the break-even utilisation is the least fraction of the target's peak at which the target is
cheaper per unit than the reference as measured: cost(u) = cost(100%) / u, so
u* = cost(100%) / reference cost. A target that emulates another device on this host is only
projected: its measured throughput is the host's and is never priced as the instance.

Engineering cost (hours x rate) is amortised over the monthly volume to a break-even point: at
the measured cost for a real target, at each stated utilisation in the projection.
"""

from __future__ import annotations

from torchferry.check.config import CostInputs
from torchferry.errors import UsageError
from torchferry.harness.prices import UTILISATIONS
from torchferry.report.check import CostResult, DeviceTiming, ResultStatus, TimingResult


def unit_scale(unit: str) -> tuple[float, str]:
    """How many units one priced unit holds, and its name (an unchanged script's unit is its optimizer step)."""
    return (1e6, "1M tokens") if unit == "tokens" else (1e3, f"1k {unit}" if unit == "steps" else "1k samples")


def instance_entry(table: dict, instance: str) -> dict:
    entry = table.get("instances", {}).get(instance)
    if entry is None:
        raise UsageError(f"instance {instance!r} is not in the price table. Valid: {', '.join(sorted(table.get('instances', {})))}; "
                         "add it with --prices FILE.")
    return entry


def device_cost(timing: DeviceTiming, instance: str | None, table: dict, dtype: str, used: int = 1) -> tuple[dict, list[str]]:
    """Measured cost figures of one device on ``used`` accelerators, and the assumptions they rest on."""
    row: dict = {"device": timing.device, "instance": instance, "cost_per_unit": None, "utilisation": None,
                 "unit": unit_scale(timing.unit)[1], "accelerators_used": used}
    notes: list[str] = []
    if timing.throughput_per_s:
        row["throughput_per_s"] = timing.throughput_per_s
    if instance is None:
        return row, notes
    entry = instance_entry(table, instance)
    accelerators = entry.get("accelerators", 1)
    row.update(price_per_hour=entry["price_per_hour"], price_kind=entry.get("kind", "on-demand"), accelerators=accelerators,
               price_date=entry["date"], price_source=entry["source"])
    notes.append(f"{timing.device} priced as {instance}: ${entry['price_per_hour']}/h ({entry.get('kind', 'on-demand')}, "
                 f"{entry.get('region', 'region n/a')}, {entry['date']}, {entry['source']}) / {accelerators} accelerator(s)")
    if entry.get("note"):
        notes.append(f"{instance}: {entry['note']}")
    if timing.emulates:
        notes.append(f"{timing.device} emulates {timing.emulates} on this host: its measured throughput is the host's, so "
                     f"it is not priced as {instance}; the projection prices {instance} at stated fractions of its peak")
        return row, notes
    if timing.throughput_per_s:
        row["cost_per_unit"] = entry["price_per_hour"] / accelerators * used / (timing.throughput_per_s * 3600) * unit_scale(timing.unit)[0]
    peak = entry.get("peak_flops", {}).get(dtype)
    if peak and timing.flops_per_step and timing.steady:
        row["achieved_flops_per_s"] = timing.flops_per_step / timing.steady["median_s"]
        row["peak_flops_per_accelerator"] = peak / accelerators
        row["utilisation"] = row["achieved_flops_per_s"] / (peak / accelerators * used)
    elif not peak:
        notes.append(f"{instance}: peak {dtype} FLOP/s unknown, utilisation not computed")
    return row, notes


def projection(timing: DeviceTiming, instance: str, table: dict, dtype: str, used: int, ref_cost: float | None,
               eng_cost: float) -> dict:
    """The target at stated fractions of its peak: roofline step time, cost per unit, break-even utilisation."""
    entry = instance_entry(table, instance)
    peak_total = entry.get("peak_flops", {}).get(dtype)
    if not peak_total:
        known = ", ".join(entry.get("peak_flops", {})) or "none"
        return {"status": f"not computed: the price table gives no peak {dtype} FLOP/s for {instance} (it knows: {known}); "
                          f"add peak_flops = {{ {dtype} = ... }} with its source in a --prices FILE"}
    if not timing.flops_per_step or not timing.units_per_step:
        return {"status": "not computed: the reference measured no FLOPs per step"}
    scale, label = unit_scale(timing.unit)
    accelerators = entry.get("accelerators", 1)
    peak = peak_total / accelerators
    flops_per_unit = timing.flops_per_step / timing.units_per_step
    at_peak = entry["price_per_hour"] / accelerators / 3600 * flops_per_unit / peak * scale  # cost per unit at 100%
    roofline = timing.flops_per_step / (peak * used)
    rows = []
    for u in UTILISATIONS:
        cost = at_peak / u
        saving = (ref_cost - cost) / scale if ref_cost is not None else None  # per single token/sample
        rows.append({"utilisation": u, "step_s": roofline / u, "throughput_per_s": timing.units_per_step * u / roofline,
                     "cost_per_unit": cost, "break_even_units": eng_cost / saving if saving and saving > 0 else None})
    found = {"status": "computed", "instance": instance, "dtype": dtype, "unit": label, "accelerators_used": used,
             "peak_flops_per_accelerator": peak, "peaks_source": entry.get("peaks_source", "not given in the price table"),
             "flops_per_step": timing.flops_per_step, "flops_per_unit": flops_per_unit, "roofline_step_s": roofline,
             "cost_per_unit_at_peak": at_peak, "rows": rows, "break_even_utilisation": None}
    if ref_cost:
        found["break_even_utilisation"] = at_peak / ref_cost
    return found


def estimate(timing: TimingResult, cfg: CostInputs, table: dict) -> CostResult:
    """Measured cost per unit for both devices, the target's projection, and the engineering break-even."""
    if timing.ref is None or timing.target is None:
        return CostResult(status=ResultStatus.NOT_RUN, assumptions=["timing incomplete: no cost"])
    result = CostResult(status=ResultStatus.ESTIMATED)
    used = max(1, len(timing.ranks))  # the target's ranks, one accelerator each
    for timing_, key, n in ((timing.ref, "ref_instance", 1), (timing.target, "target_instance", used)):
        instance = getattr(cfg, key)
        row, notes = device_cost(timing_, instance, table, cfg.dtype, n)
        row["role"] = key.split("_")[0]
        if instance is None:
            notes = [f"{timing_.device}: no instance priced; pass --{key.replace('_', '-')} NAME (see --prices)"]
        result.devices.append(row)
        result.assumptions += notes
    ref_row, target_row = result.devices
    hours, rate, volume = cfg.eng_hours, cfg.eng_rate, cfg.volume
    eng_cost = hours * rate
    if cfg.target_instance is not None:
        result.projection = projection(timing.target, cfg.target_instance, table, cfg.dtype, used, ref_row["cost_per_unit"],
                                       eng_cost)
    result.assumptions += [
        "measured cost: the steady-state median throughput on this machine, assumed delivered per accelerator by the "
        "priced instance and scaled linearly across its accelerators (data parallel); when the device here is other "
        "hardware than the priced instance (another GPU), it shows the method, not a forecast",
        "FLOPs of one step on the reference by PyTorch's formulas (torch.utils.flop_counter; matmul/conv/attention-class "
        "ops: elementwise work and the optimizer are not counted, so the roofline bound is a lower bound)",
        f"projection: the target's step at {', '.join(f'{u:.0%}' for u in UTILISATIONS)} of its peak; the roofline "
        "bound is compute only (FLOPs / peak), memory traffic and communication are not modelled",
    ]
    result.assumptions.append(f"engineering: {hours:g} h x ${rate:g}/h = ${eng_cost:,.0f}; volume {volume:,.0f} "
                              f"{ref_row['unit'].split(' ', 1)[1]} per month (--eng-hours, --eng-rate, --volume)")
    result.break_even = {"engineering_cost": eng_cost, "volume_per_month": volume}
    if ref_row["cost_per_unit"] is None:
        result.break_even["status"] = "not computed: the reference has no price (pass --ref-instance NAME)"
        return result
    if cfg.target_instance is None:
        result.break_even["status"] = "not computed: the target has no price (pass --target-instance NAME)"
        return result
    if target_row["cost_per_unit"] is None:
        result.break_even["status"] = break_even_by_utilisation(result.projection, timing.target)
        return result
    scale, _ = unit_scale(timing.target.unit)
    saving = (ref_row["cost_per_unit"] - target_row["cost_per_unit"]) / scale  # per single token/sample
    result.break_even["saving_per_unit"] = saving * scale
    if saving <= 0:
        result.break_even["status"] = "never: the target costs more per unit"
    else:
        units = eng_cost / saving
        result.break_even.update(status="reached", units=units, months=units / volume if volume else None)
    return result


def break_even_by_utilisation(p: dict, target: DeviceTiming) -> str:
    """The break-even status when only the target's projection is priced (an emulated or unpriced-as-measured target)."""
    why = f"the target emulates {target.emulates} here" if target.emulates else "the target's throughput is not priced"
    u = p.get("break_even_utilisation")
    if u is None:
        return f"not computed: {why}, and its projection is {p.get('status', 'missing')}"
    if u > 1:
        return f"never: even at 100% of {p['instance']}'s peak the target costs more per unit than the reference ({why})"
    return (f"projected: the target is cheaper per unit from {u * 100:.3g}% of {p['instance']}'s peak {p['dtype']} FLOP/s "
            f"({why}; engineering recovered per utilisation in the projection)")
