"""`ferry plan`: will a training job fit the target's cores, and what must a step cost at least.

    ferry plan --size 8b                         # Llama-3-8B, FSDP2 over trn2.48xlarge's 64 logical cores
    ferry plan --size 70b --tp 4 --checkpointing on
    ferry plan --size 8b --search --ref-instance p5.48xlarge
    ferry plan -w small.json --world 2 --validate   # prediction vs the built-in device's measured peak

Every option is checked before anything is traced. Light at import: torch is imported inside ``run``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from torchferry.env import Environment
from torchferry.errors import FerryError, UsageError
from torchferry.harness import bounds, options
from torchferry.status import ExitStatus

if TYPE_CHECKING:
    from torchferry.workloads.footprint.model import ModelSpec
    from torchferry.report.plan import Layout, Peaks, PlanReport



def add_arguments(parser: argparse.ArgumentParser) -> None:
    from torchferry.plan.layout import CHECKPOINTING, OPTIMIZERS

    m = parser.add_argument_group("model (one of)")
    lay = parser.add_argument_group("layout")
    lay.add_argument("--world", type=int, help="ranks, one per logical core (default: the instance's accelerators)")
    lay.add_argument("--fsdp", type=int, help="FSDP2 sharding degree (default: world / tp)")
    lay.add_argument("--tp", type=int, help="tensor-parallel degree (default: world / fsdp, else 1)")
    lay.add_argument("--checkpointing", default="off", help=f"activation checkpointing: {', '.join(CHECKPOINTING)} (default: off)")
    lay.add_argument("--micro-batch", type=int, help="sequences per data-parallel rank per step (default: 1)")
    lay.add_argument("--optimizer", default="adamw", help=f"{', '.join(OPTIMIZERS)} (default: adamw)")
    lay.add_argument("--search", action="store_true",
                     help="try FSDP x TP 1, 2, 4, each without and with checkpointing; rank those that fit by step time")
    t = parser.add_argument_group("target")
    t.add_argument("--capacity", help="memory per logical core, e.g. 24GiB (default: the device profile's)")
    v = parser.add_argument_group("validation")
    v.add_argument("--validate", action="store_true",
                   help="run the layout on the built-in device (world processes here, small configs) and report the "
                        "prediction's error against the measured peak")
    o = parser.add_argument_group("output")
    options.add_arguments(parser, "plan", {"workload": m, "size": m, "trust_remote_code": m, "batch_size": lay,
                                           "seq_len": lay, "precision": lay, "devices": t, "cost": t,
                                           "output": o})


# The trace cuts every parameter into one FSDP shard per rank on a fake process group, so its time grows with the
# world (docs/plan.md gives the measured times); 1024 ranks are 16 trn2.48xlarge of 64 logical cores.
MAX_WORLD = 1024
WORLD = bounds.Bound(low=1, high=MAX_WORLD, whole=True,
                     why=f"ferry plan traces one rank of the layout, with one shard per rank of every parameter; past "
                         f"{MAX_WORLD} ranks that takes many minutes.")


def _capacity(args: argparse.Namespace) -> dict:
    if args.capacity is not None:
        from torchferry.device import parse_bytes

        return {"bytes": parse_bytes(args.capacity, "--capacity"), "source": f"--capacity {args.capacity}"}
    from torchferry.device.profile import load_profile

    profile = load_profile(args.profile)
    return {"bytes": profile.memory_bytes,
            "source": f"device profile {profile.name}: memory_bytes ({profile.sources.get('hbm', profile.description)})"}


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.harness.prices import load_prices
    from torchferry.plan.layout import check_model_fits_tp, make_layout, search_layouts
    from torchferry.plan.roofline import compute_dtype, peaks
    from torchferry.plan.workload import resolve
    from torchferry.report.core import ensure_writable
    from torchferry.workloads.footprint.trace import check_traceable

    started = time.monotonic()
    options.apply_defaults(args, "plan")
    options.check_values(args, "plan")
    model = resolve(args.size, args.workload, args.trust_remote_code)
    check_traceable(model)
    table = load_prices(args.prices)
    instance = args.target_instance or table.get("devices", {}).get("neuron")
    if instance not in table["instances"]:
        raise UsageError(f"--target-instance {instance!r} is not in the price table. Valid: "
                         f"{', '.join(sorted(table['instances']))}; add it with --prices FILE.")
    bounds.check_all({"--world": (args.world, WORLD), **{f"--{n.replace('_', '-')}": (getattr(args, n), bounds.COUNT)
                                                         for n in ("fsdp", "tp", "micro_batch")}})
    world = args.world if args.world is not None else table["instances"][instance].get("accelerators", 1)
    layout = make_layout(world, args.fsdp, args.tp, args.checkpointing, args.micro_batch, args.batch_size, args.seq_len,
                         args.precision, args.optimizer)
    check_model_fits_tp(layout, model.shape())
    capacity = _capacity(args)
    dtype = compute_dtype(layout.precision)
    target = peaks(table, instance, dtype)
    reference = peaks(table, args.ref_instance, dtype, need_links=False) if args.ref_instance else None
    if args.validate:
        from torchferry.plan.validate import MAX_RANKS

        if layout.world > MAX_RANKS:
            raise UsageError(f"--validate starts one process per rank here: --world {layout.world} is too many. Validate "
                             f"a small config with --world 2 to {MAX_RANKS} (e.g. -w small.json --world 2).")
    candidates, skipped = search_layouts(layout, model.shape()) if args.search else ([layout], [])
    if not candidates:
        raise UsageError(f"--search found no layout for {layout.world} ranks: {'; '.join(skipped)}.")
    outdir = Path(args.output)
    ensure_writable(outdir)
    return _plan(args, env, model, capacity, target, reference, candidates, skipped, outdir, started)


def _plan(args: argparse.Namespace, env: Environment, model: ModelSpec, capacity: dict, target: Peaks,
          reference: Peaks | None, candidates: list[Layout], skipped: list[str], outdir: Path, started: float) -> ExitStatus:
    """Trace each candidate, bound it, validate it if asked; write the reports (also of what was traced
    when a later candidate fails)."""
    from torchferry.plan.roofline import reference_bounds, target_bounds
    from torchferry.workloads.footprint.trace import expectation, trace_step
    from torchferry.report.meta import new_meta
    from torchferry.report.plan import FORMAT, FORMAT_VERSION, LayoutResult, PlanReport, rank
    from torchferry.report.plan_render import REPORTERS, render_text

    progress = (lambda text: None) if args.quiet else env.err
    report = PlanReport(meta=new_meta(FORMAT, FORMAT_VERSION, getattr(args, "_argv", [])), model=model.to_dict(),
                        capacity=capacity, target=target, reference=reference, searched=args.search, skipped=skipped)
    results = []
    try:
        for layout in candidates:
            progress(f"ferry plan: tracing {model.name}, {layout.label} on {layout.world} fake ranks "
                     f"({expectation(model)}) ...")
            trace = trace_step(model, layout, say=lambda text: progress(f"ferry plan: {text}"))
            results.append(LayoutResult(layout=layout, trace=trace, capacity_bytes=capacity["bytes"],
                                        bounds=target_bounds(trace, layout, target),
                                        reference=reference_bounds(trace, layout, reference) if reference else None))
        report.layouts = rank(results)
        if args.validate:
            from torchferry.plan.validate import compare, measure

            for result in results:
                progress(f"ferry plan: measuring {result.layout.label} on the built-in device, {result.layout.world} processes ...")
                report.validations.append(compare(result.layout, result.trace.peak_bytes, measure(model, result.layout)))
    except FerryError as exc:
        if results:  # keep what was traced
            report.layouts = rank(results)
            report.notes.append(f"stopped early: {exc}")
            _write(report, outdir, started, REPORTERS)
        raise
    paths = _write(report, outdir, started, REPORTERS)
    env.out(render_text(report, [str(p) for p in paths]))
    if any(not v.passed for v in report.validations) or report.best is None:
        return ExitStatus.NEGATIVE_RESULT
    return ExitStatus.SUCCESS


def _write(report: PlanReport, outdir: Path, started: float, reporters: tuple) -> list[Path]:
    from torchferry.report.core import write_reports

    report.meta.wall_s = round(time.monotonic() - started, 3)
    return write_reports(report, reporters, outdir)
