"""The verdict: go, go-with-conditions or no-go, with the reason per result.

A run that something other than a finding ended (a timeout, Ctrl-C, an error, a bug) is
``stopped``: the results measured so far keep their own verdicts, but no overall decision
is made from a part of the evidence.
"""

from __future__ import annotations

from torchferry.report.check import (
    CONDITIONS,
    GO,
    NO_GO,
    NOT_RUN,
    STOPPED,
    CheckReport,
    NextAction,
    ParityStatus,
    RehearsalStatus,
    VerdictItem,
)
from torchferry.report.comparison import FINAL_BUFFER, describe
from torchferry.report.text import span


def _parity(report: CheckReport) -> VerdictItem:
    p = report.parity
    if p.status == "pass" and report.script is not None:
        buffers = " and buffers" if any(c.name.startswith(FINAL_BUFFER) for c in p.outputs) else ""
        judged = (f"loss and gradient-norm curves and final parameters{buffers}" if p.grad_norm_curve else
                  "each module's output at the model's first call" if report.script.forward_calls else "the losses")
        return VerdictItem("parity", GO, f"{judged} within the rule: {p.tolerance.get('rule')}")
    if p.status == "pass":
        return VerdictItem("parity", GO, f"outputs, gradients, loss curve and tokens within the fp64-relative rule (tol {p.tolerance.get('tol')})")
    if p.status == "eager_two_runs_differ":
        return VerdictItem("parity", CONDITIONS, "target within tolerance, but the reference is not deterministic; " + "; ".join(p.notes))
    if p.status == NOT_RUN:
        return VerdictItem("parity", NOT_RUN, "; ".join(p.notes) or "not measured")
    if p.first_divergent_module is not None:  # where the two sides first differ decides: it leads
        m = p.first_divergent_module
        return VerdictItem("parity", NO_GO, f"first divergent module {m.name} ({describe(m)}); {p.status}"
                                            + (f": {p.notes[0]}" if p.notes else ""))
    return VerdictItem("parity", NO_GO, f"{p.status}: {p.notes[0] if p.notes else ''}")


def _timing(report: CheckReport) -> VerdictItem:
    t = report.timing
    if t.status != "measured" or t.ref is None or t.target is None or t.target.time_to_n_s is None:
        return VerdictItem("time", NOT_RUN, "not measured to the end")
    if t.target.emulates:
        return VerdictItem("time", NOT_RUN, f"not judged from times: the target emulates {t.target.emulates} on this host, "
                                            "so its times are the cost of the emulation here; the rehearsal result "
                                            f"judges what decides {t.target.emulates}'s time (compilations, fallbacks, syncs)")
    unstable = [f"{role} {d.device}" for role, d in (("ref", t.ref), ("target", t.target)) if d.stability.get("stable") is False]
    conditions = [f"unstable steady state on {', '.join(unstable)} (see the warnings)"] if unstable else []
    if t.speedup_time_to_n is not None and t.speedup_time_to_n < 1:
        conditions.append(f"target takes {1 / t.speedup_time_to_n:.2f}x the reference's time to {span(t)}")
    if t.target.fallback_ops:
        conditions.append(f"{sum(t.target.fallback_ops.values())} fallback op calls ({len(t.target.fallback_ops)} ops)")
    if conditions:
        return VerdictItem("time", CONDITIONS, "; ".join(conditions))
    return VerdictItem("time", GO, f"time to {span(t)} {t.target.time_to_n_s:.2f} s vs {t.ref.time_to_n_s:.2f} s")


def _resume(report: CheckReport) -> VerdictItem:
    r = report.resume
    if r.status == "pass":
        return VerdictItem("resume", GO, f"resumed at step {r.saved_at_step} in a fresh process; losses match "
                                         f"({'exactly' if r.exact else f'max |diff| {r.max_abs_diff:.3g}'})")
    if r.status == "fail":
        return VerdictItem("resume", NO_GO, "; ".join(r.notes) or "resumed losses differ")
    return VerdictItem("resume", NOT_RUN, "; ".join(r.notes) or "not measured")


def _exit(report: CheckReport) -> VerdictItem:
    e = report.exit
    if e.status == "pass":
        return VerdictItem("exit", GO, f"all formats reload on {e.loader_device} without torchferry and keep parity")
    if e.status == "conditions":
        tagged = [f.name for f in e.formats if f.needs_map_location]
        reasons = [f"{', '.join(tagged)} load only with map_location (device-tagged storages)"] if tagged else []
        return VerdictItem("exit", CONDITIONS, "; ".join(reasons + e.notes[-1:]))
    if e.status == "fail":
        bad = [f"{f.name}: {f.error or f.fix or 'parity lost'}" for f in e.formats
               if not f.saved or f.needs_package or (f.error and not f.needs_map_location) or (f.parity and not f.parity.passed)]
        return VerdictItem("exit", NO_GO, "; ".join(bad + e.notes) or "exit failed")
    return VerdictItem("exit", NOT_RUN, "; ".join(e.notes) or "not measured")


def _cost(report: CheckReport) -> VerdictItem:
    c = report.cost
    if c.status == NOT_RUN:
        return VerdictItem("cost", NOT_RUN, "not estimated")
    status = c.break_even.get("status", "")
    if status == "reached":
        months = c.break_even.get("months")
        return VerdictItem("cost", GO, f"target cheaper per unit; engineering cost recovered after "
                                       f"{c.break_even['units']:,.0f} units" + (f" ({months:.1f} months)" if months else ""))
    return VerdictItem("cost", CONDITIONS, f"break-even {status}")


def _rehearsal(report: CheckReport) -> VerdictItem:
    r = report.rehearsal
    if r.status == RehearsalStatus.FAIL:
        p = r.placement
        return VerdictItem("rehearsal", NO_GO, f"portability failure: {p.op} mixes devices ({', '.join(p.devices)}) at "
                                               f"{p.file}:{p.line}: {p.code}")
    if r.status == RehearsalStatus.CONDITIONS:
        return VerdictItem("rehearsal", CONDITIONS, "; ".join(c.split(": ")[0] for c in r.conditions)
                           + " (the rehearsal section names what to change)")
    if r.status == RehearsalStatus.CLEAN:
        graphs = f"; {r.compile.graphs} compiled graphs, one per frame" if r.compile else ""
        steps = (f"{r.signatures_step1} eager signatures in step 1, {sum(r.new_signatures)} new after"
                 if r.signatures_step1 is not None else "no step completed")
        return VerdictItem("rehearsal", GO, f"on {r.emulates}: no predicted host fallback; {steps}{graphs}")
    return VerdictItem("rehearsal", NOT_RUN, "; ".join(r.notes) or "not rehearsed")


def _scan(report: CheckReport) -> VerdictItem | None:
    """A script's lines `ferry scan` names as CUDA-only (only for a script): conditions when one would fail or fall back
    to the CPU on another accelerator; a branch only CUDA takes is no condition (the run showed the script runs)."""
    if report.script is None:
        return None
    errors = [f for f in report.script.scan_findings if f.get("severity") == "error"]
    if errors:
        return VerdictItem("scan", CONDITIONS, f"{len(errors)} line(s) name CUDA where another accelerator fails or "
                                               "falls back to the CPU (the next actions name them)")
    guarded = len(report.script.scan_findings)
    return VerdictItem("scan", GO, f"no line names CUDA outside a branch only CUDA takes ({guarded} such line(s))")


def next_actions(report: CheckReport) -> list[NextAction]:
    """Every condition and failure of the verdict with its fix, as one list: what to do before the move.

    Each result says its own: the rehearsal's conditions carry their fixes, an exit format its fix, the
    cost result which price is missing; a result that is go adds nothing.
    """
    actions: list[NextAction] = []
    f = report.failure
    if f and not f.finding:
        actions.append(NextAction("run", f"the run stopped during {f.phase or 'the run'} ({f.kind}): {f.message}"))
    by_result = {item.result: item for item in report.verdicts}
    p = report.parity
    target_failed = p.status == ParityStatus.FAIL_TO_RUN and f is not None and f.finding
    if target_failed:  # the finding says where the target failed and what to change: it leads
        actions.append(NextAction("run", f.message))
    if by_result.get("parity") and by_result["parity"].verdict in (NO_GO, CONDITIONS) and not target_failed:
        if p.status == "eager_two_runs_differ":
            actions.append(NextAction("parity", "make the reference deterministic (seed every generator; "
                                                "torch.use_deterministic_algorithms(True)) so the target can be judged"))
        elif buffers := [c.name.removeprefix(FINAL_BUFFER + " ") for c in p.outputs
                         if not c.passed and c.name.startswith(FINAL_BUFFER + " ")]:
            lost = " (an op the rehearsal predicts on the host may lose an in-place update: its section says which)" \
                if report.rehearsal.fallbacks else ""
            actions.append(NextAction("parity", f"find why the model's buffers end otherwise on the target: "
                                                f"{', '.join(buffers[:3])}{' and more' if len(buffers) > 3 else ''}. A "
                                                "buffer changes in place in the forward, outside the optimizer (a "
                                                "BatchNorm's running statistics): an evaluation and a checkpoint read "
                                                f"it{lost}"))
        else:
            where = f" from module {p.first_divergent_module.name}" if p.first_divergent_module else ""
            actions.append(NextAction("parity", f"find why the target diverges{where} ({p.status}; the parity section "
                                                "has the figures)"))
    r = report.rehearsal
    if r.status == RehearsalStatus.FAIL and r.placement:
        pl = r.placement
        actions.append(NextAction("rehearsal", f"put every input of {pl.op} on one device at {pl.file}:{pl.line} "
                                               f"(`{pl.code}` mixes {', '.join(pl.devices)})"))
    actions += [NextAction("rehearsal", c) for c in r.conditions]
    said = f.message if f else ""
    actions += [NextAction("scan", f"{s['path']}:{s['line']}: {s['rule_id']} {s['message']} Fix: {s['fix']}")
                for s in (report.script.scan_findings if report.script else []) if s.get("severity") == "error"
                and f"{s['path']}:{s['line']}" not in said]
    t = by_result.get("time")
    if t and t.verdict == CONDITIONS:
        actions += [NextAction("time", c + (": rerun on a quiet machine, or raise --steady-budget" if "unstable" in c else ""))
                    for c in t.reason.split("; ")]
    if report.resume.status == "fail":
        actions.append(NextAction("resume", "make the resumed run match: " + ("; ".join(report.resume.notes)
                                                                             or "resumed losses differ")))
    for fmt in report.exit.formats:
        broken = not fmt.saved or fmt.needs_package or fmt.needs_map_location or fmt.error or (
            fmt.parity is not None and not fmt.parity.passed)
        if broken:
            actions.append(NextAction("exit", f"{fmt.name}: {fmt.fix or fmt.error or 'parity lost after reloading'}"))
    c = report.cost
    status = c.break_even.get("status", "")
    if c.status != NOT_RUN and status and status != "reached":
        actions.append(NextAction("cost", f"break-even {status}"))
    if not (f and not f.finding) and not target_failed:  # a completed run without parity or exit is no clean go
        actions += [NextAction(i.result, f"not measured: {i.reason}") for i in report.verdicts
                    if i.verdict == NOT_RUN and i.result in _needed(report)]
    if f and f.finding and not target_failed and not any(a.result in ("parity", "rehearsal") for a in actions):
        actions.append(NextAction("run", f.message))
    return actions


def _needed(report: CheckReport) -> tuple[str, ...]:
    """The results a completed run must measure to be a clean go: parity, and the exit of what it trained (an inference
    script trains nothing, so it has no checkpoint to carry back)."""
    return ("parity",) if report.script is not None and report.script.forward_calls else ("parity", "exit")


def decide(report: CheckReport) -> None:
    """Fill ``report.verdicts`` and ``report.verdict``: no-go if any result is no-go, conditions if any is not go."""
    items = [_parity(report), _timing(report), _resume(report), _exit(report), _cost(report), _rehearsal(report)]
    items += [item for item in [_scan(report)] if item is not None]
    if report.failure and not report.failure.finding:
        items.append(VerdictItem("run", STOPPED, f"stopped: {report.failure.kind}: {report.failure.message}"))
        report.verdicts, report.verdict = items, STOPPED
        report.next_actions = next_actions(report)
        return
    if report.failure:
        items.append(VerdictItem("run", NO_GO, report.failure.message))
    report.verdicts = items
    decided = [i.verdict for i in items if i.verdict != NOT_RUN]
    if NO_GO in decided:
        report.verdict = NO_GO
    elif CONDITIONS in decided or any(i.verdict == NOT_RUN and i.result in _needed(report) for i in items):
        report.verdict = CONDITIONS
    else:
        report.verdict = GO if decided else NOT_RUN
    report.next_actions = next_actions(report)
    deciding = next((i for i in items if i.verdict == report.verdict), None) if report.verdict == NO_GO else None
    report.decision = f"{deciding.result}: {deciding.reason}" if deciding else ""
