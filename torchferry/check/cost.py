"""Effective cost from measured throughput and a dated price table, with every assumption stated.

cost per 1M tokens (or 1k samples) = price per hour / accelerators per instance
/ (measured steady throughput x 3600) x unit. Utilisation = achieved FLOP/s (PyTorch's
FlopCounterMode over one step, divided by the median step time) / the accelerator's peak
for the run's dtype, where the table knows it. Engineering cost (hours x rate) is
amortised over the stated monthly volume to a break-even point.
"""

from __future__ import annotations

from torchferry.check.config import CostInputs
from torchferry.errors import UsageError
from torchferry.report.check import CostResult, DeviceTiming, ResultStatus, TimingResult


def unit_scale(unit: str) -> tuple[float, str]:
    return (1e6, "1M tokens") if unit == "tokens" else (1e3, "1k samples")


def device_cost(timing: DeviceTiming, instance: str | None, table: dict, dtype: str) -> tuple[dict, list[str]]:
    """Cost figures of one device and the assumptions they rest on."""
    row: dict = {"device": timing.device, "instance": instance, "cost_per_unit": None, "utilisation": None}
    notes: list[str] = []
    scale, label = unit_scale(timing.unit)
    row["unit"] = label
    if timing.throughput_per_s:
        row["throughput_per_s"] = timing.throughput_per_s
    if timing.flops_per_step and timing.steady:
        row["achieved_flops_per_s"] = timing.flops_per_step / timing.steady["median_s"]
    if instance is None:
        return row, notes
    entry = table.get("instances", {}).get(instance)
    if entry is None:
        raise UsageError(f"instance {instance!r} is not in the price table. Valid: {', '.join(sorted(table.get('instances', {})))}; "
                         "add it with --prices FILE.")
    accelerators = entry.get("accelerators", 1)
    per_accel_hour = entry["price_per_hour"] / accelerators
    row.update(price_per_hour=entry["price_per_hour"], price_kind=entry.get("kind", "on-demand"), accelerators=accelerators,
               price_date=entry["date"], price_source=entry["source"])
    notes.append(f"{timing.device} priced as {instance}: ${entry['price_per_hour']}/h ({entry.get('kind', 'on-demand')}, "
                 f"{entry.get('region', 'region n/a')}, {entry['date']}, {entry['source']}) / {accelerators} accelerator(s)")
    if entry.get("note"):
        notes.append(f"{instance}: {entry['note']}")
    if timing.throughput_per_s:
        row["cost_per_unit"] = per_accel_hour / (timing.throughput_per_s * 3600) * scale
    peak = entry.get("peak_flops", {}).get(dtype)
    if peak and row.get("achieved_flops_per_s"):
        row["peak_flops_per_accelerator"] = peak / accelerators
        row["utilisation"] = row["achieved_flops_per_s"] / (peak / accelerators)
    elif not peak:
        notes.append(f"{instance}: peak {dtype} FLOP/s unknown, utilisation not computed")
    return row, notes


def estimate(timing: TimingResult, cfg: CostInputs, table: dict) -> CostResult:
    """Cost per unit for both devices, utilisation, and the engineering break-even (instances resolved in the config)."""
    if timing.ref is None or timing.target is None:
        return CostResult(status=ResultStatus.NOT_RUN, assumptions=["timing incomplete: no cost"])
    result = CostResult(status=ResultStatus.ESTIMATED)
    for timing_, key in ((timing.ref, "ref_instance"), (timing.target, "target_instance")):
        instance = getattr(cfg, key)
        row, notes = device_cost(timing_, instance, table, cfg.dtype)
        row["role"] = key.split("_")[0]
        if instance is None:
            notes = [f"{timing_.device}: no instance priced; pass --{key.replace('_', '-')} NAME (see --prices)"]
        result.devices.append(row)
        result.assumptions += notes
    result.assumptions += [
        "throughput is the measured steady-state median on this machine; the priced instance is assumed to deliver it "
        "per accelerator and to scale linearly across its accelerators (data parallel). When the device here is not the "
        "priced hardware (an emulated device, another GPU), the figure shows the method, not a forecast",
        "FLOPs from torch.utils.flop_counter.FlopCounterMode over one step (matmul/conv-class ops only)",
    ]
    ref_row, target_row = result.devices
    hours, rate, volume = cfg.eng_hours, cfg.eng_rate, cfg.volume
    eng_cost = hours * rate
    result.assumptions.append(f"engineering: {hours:g} h x ${rate:g}/h = ${eng_cost:,.0f}; volume {volume:,.0f} "
                              f"{ref_row['unit'].split(' ', 1)[1]} per month (--eng-hours, --eng-rate, --volume)")
    result.break_even = {"engineering_cost": eng_cost, "volume_per_month": volume}
    if ref_row["cost_per_unit"] is None or target_row["cost_per_unit"] is None:
        result.break_even["status"] = "not computed: a device has no price"
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
