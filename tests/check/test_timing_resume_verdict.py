"""Timing summaries, steady-state stability and added rounds, the resume judgement and the verdict rules."""

import time

import pytest
from checkcfg import make_config

from torchferry.check import resume, timing, verdict
from torchferry.check.resume import Resumed
from torchferry.check.runner import Runner
from torchferry.check.timing import StepFigures
from torchferry.harness.devices import Memory
from torchferry.harness.window import Ops, Reading
from torchferry.report.check import CheckReport, Failure, ParityResult, TimingResult
from torchferry.report.meta import Meta


def test_percentile_interpolates():
    assert timing.percentile([1, 2, 3, 4, 5], 50) == 3
    assert abs(timing.percentile(list(range(11)), 90) - 9.0) < 1e-9


def test_device_timing_pools_interleaved_rounds_into_median_p90_and_throughput():
    reading = Reading("cpu", Ops(97, {"aten::foo": 3}), Memory(0, "host RSS"), None, None)
    t = timing.device_timing("cpu", StepFigures(time_to_n_s=2.0, units_per_step=64, unit="tokens", steps=[0.5, 0.1],
                                                reading=reading), [[0.1, 0.2], [0.3]])
    assert t.steady == {"median_s": 0.2, "p90_s": timing.percentile([0.1, 0.2, 0.3], 90), "samples": 3, "rounds": 2}
    assert t.throughput_per_s == 64 / 0.2
    assert t.fallback_share == 0.03


def test_speedup_compares_time_to_n_steps():
    ref = timing.device_timing("cpu", StepFigures(time_to_n_s=4.0), [[1.0]])
    tgt = timing.device_timing("x", StepFigures(time_to_n_s=2.0), [[0.25]])
    result = timing.summarise(ref, tgt)
    assert result.speedup_time_to_n == 2.0 and result.speedup_steady == 4.0


def test_resume_matches_and_mismatches():
    ok = resume.judge([1.0, 0.9, 0.8, 0.7], Resumed(step=2, losses=[0.8, 0.7]), 1e-2)
    assert ok.status == "pass" and ok.exact
    bad = resume.judge([1.0, 0.9, 0.8, 0.7], Resumed(step=2, losses=[0.8, 0.5]), 1e-2)
    assert bad.status == "fail" and "step 4" in bad.notes[0]


def _report(**kw) -> CheckReport:
    r = CheckReport(meta=Meta(format="torchferry.check", format_version=3), environment={}, config={"steps": 4})
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_any_no_go_result_makes_the_verdict_no_go():
    r = _report(parity=ParityResult(status="fail_accuracy", notes=["outputs differ"]))
    verdict.decide(r)
    assert r.verdict == "no-go"
    assert next(i for i in r.verdicts if i.result == "parity").verdict == "no-go"


def test_unmeasured_parity_or_exit_never_gives_a_plain_go():
    r = _report(parity=ParityResult(status="pass"), timing=TimingResult())
    verdict.decide(r)
    assert r.verdict == "go-with-conditions"


def test_a_stopped_run_is_stopped_not_no_go_and_keeps_each_results_verdict():
    r = _report(parity=ParityResult(status="pass"), failure=Failure(kind="timeout", message="no result", exit_status=8))
    verdict.decide(r)
    assert r.verdict == "stopped"
    assert next(i for i in r.verdicts if i.result == "parity").verdict == "go"
    assert r.verdicts[-1].result == "run" and r.verdicts[-1].reason.startswith("stopped: timeout")


def test_a_target_failure_is_a_finding_and_no_go():
    r = _report(failure=Failure(kind="fail_to_run", message="died", exit_status=3, finding=True))
    verdict.decide(r)
    assert r.verdict == "no-go"


def test_a_target_that_failed_to_run_leads_the_next_actions_with_where_and_what_to_change():
    """Not 'find why the target diverges', nor 'exit: not measured': the target never ran to the end."""
    message = "missing kernel at train.py:20: ... Next step: keep the RNN on the CPU."
    r = _report(parity=ParityResult(status="fail_to_run"),
                failure=Failure(kind="fail_to_run", message=message, exit_status=3, finding=True))
    verdict.decide(r)
    assert [(a.result, a.action) for a in r.next_actions][0] == ("run", message)
    assert not any(a.result in ("parity", "exit") for a in r.next_actions)


def test_a_final_buffer_outside_the_rule_is_named_in_the_next_action():
    from torchferry.report.comparison import Comparison

    failing = Comparison("final buffer 1.running_mean (BatchNorm2d)", False, "fail_accuracy")
    r = _report(parity=ParityResult(status="fail_accuracy", outputs=[failing], notes=["1 check(s) outside the rule"]))
    verdict.decide(r)
    [action] = [a.action for a in r.next_actions if a.result == "parity"]
    assert "1.running_mean (BatchNorm2d)" in action and "BatchNorm's running statistics" in action


def test_stability_from_the_coefficient_of_variation_and_the_spread_of_round_medians():
    steady = timing.stability([[1.0, 1.0], [1.0, 1.0]])
    assert (steady["cv"], steady["round_spread"], steady["stable"]) == (0.0, 0.0, True)
    noisy = timing.stability([[1.0, 1.0], [2.0, 2.0]])  # mean 1.5, sample stdev sqrt(1/3); medians 1 and 2 over 1.5
    assert noisy["cv"] == pytest.approx((1 / 3) ** 0.5 / 1.5) and noisy["round_spread"] == pytest.approx(1 / 1.5)
    assert noisy["stable"] is False
    drift = timing.stability([[1.0, 1.0, 1.0, 1.0], [1.15, 1.15, 1.15, 1.15]])  # cv 7.4%, but rounds 14% apart
    assert drift["cv"] < timing.MAX_CV and drift["stable"] is False
    assert timing.stability([[1.0]])["stable"] is None  # one sample: not judged


def _real(rounds):
    return timing.device_timing("x", StepFigures(time_to_n_s=2.0), rounds)


def test_unstable_figures_warn_and_make_the_time_result_conditional():
    r = _report(timing=timing.summarise(_real([[1.0, 1.0], [1.0, 1.0]]), _real([[1.0, 3.0], [1.0, 1.0]])))
    r.timing.ref.device = "cpu"
    assert len(r.timing.warnings) == 1 and r.timing.warnings[0].startswith("unstable: target x steady state varies")
    verdict.decide(r)
    item = next(i for i in r.verdicts if i.result == "time")
    assert item.verdict == "go-with-conditions" and "unstable" in item.reason


def test_every_report_shows_the_instability_warning():
    from torchferry.report import htmlreport, jsonreport, text

    r = _report(timing=timing.summarise(_real([[1.0, 1.0]]), _real([[1.0, 3.0], [1.0, 1.0]])))
    r.config.update(workload="w", mode="train", dtype="float32", size="tiny", ref="x", target="x")
    verdict.decide(r)
    warning = r.timing.warnings[0]
    assert f"WARNING: {warning}" in text.render(r)
    assert f'<p class="no-go timing-warning">Warning: {warning}</p>' in htmlreport.render(r)
    assert warning in jsonreport.render(r)


def test_an_emulated_targets_times_are_labelled_and_decide_nothing():
    target = timing.device_timing("neuron", StepFigures(time_to_n_s=9.0, emulates="trn2"), [[1.0, 1.0]])
    r = _report(timing=timing.summarise(_real([[0.1, 0.1]]), target))
    assert any("emulates trn2 on this host" in n for n in r.timing.notes)
    verdict.decide(r)
    item = next(i for i in r.verdicts if i.result == "time")
    assert item.verdict == "not-run" and "cost of the emulation" in item.reason  # 4.5x slower here: not a condition


class _Group:
    """A device's workers as the runner sees them: each steady round answers with the next times of ``rounds``."""

    ranks = 1

    def __init__(self, rounds, delay=0.0):
        self.rounds, self.delay, self.proc = iter(rounds), delay, self

    def send(self, **_command):
        pass

    def gather(self, *_wanted, phase):
        time.sleep(self.delay)
        return [{"times": next(self.rounds)}]


def _runner(tmp_path, *args):
    cfg = make_config(tmp_path, "--rounds", "2", "--reps", "2", *args)
    return Runner(_report(), cfg, note=lambda _message: None)


STEADY, DISTURBED = [1.0, 1.0], [2.0, 2.0]


def test_rounds_are_added_until_the_latest_rounds_are_stable_and_those_are_the_steady_state(tmp_path):
    runner = _runner(tmp_path, "--steady-budget", "60")
    ref, target = _Group([STEADY] * 9), _Group([STEADY, DISTURBED, STEADY, DISTURBED, STEADY, STEADY, DISTURBED])
    steady = runner.interleave({"ref": ref, "target": target}, extend=True)
    assert runner.rounds_run == 6  # rounds 5-6 are the first stable pair of latest rounds
    assert steady == {"ref": [[STEADY, STEADY]], "target": [[STEADY, STEADY]]}


def test_no_rounds_are_added_without_extension_or_budget(tmp_path):
    for runner, extend in ((_runner(tmp_path, "--steady-budget", "60"), False), (_runner(tmp_path, "--steady-budget", "0"), True)):
        steady = runner.interleave({"ref": _Group([STEADY] * 3), "target": _Group([STEADY, DISTURBED, STEADY])}, extend=extend)
        assert runner.rounds_run == 2 and steady["target"] == [[STEADY, DISTURBED]]


def test_rounds_stop_when_the_budget_runs_out(tmp_path):
    runner = _runner(tmp_path, "--steady-budget", "0.3")
    forever = [STEADY, DISTURBED] * 50
    started = time.monotonic()
    runner.interleave({"ref": _Group([STEADY] * 100, delay=0.02), "target": _Group(forever, delay=0.02)}, extend=True)
    assert 2 < runner.rounds_run < 20 and time.monotonic() - started < 2
