"""Timing summaries, the resume judgement and the verdict rules."""

from torchferry.check import resume, timing, verdict
from torchferry.report.check import CheckReport, Failure, ParityResult, TimingResult
from torchferry.report.meta import Meta


def test_percentile_interpolates():
    assert timing.percentile([1, 2, 3, 4, 5], 50) == 3
    assert abs(timing.percentile(list(range(11)), 90) - 9.0) < 1e-9


def test_device_timing_pools_interleaved_rounds_into_median_p90_and_throughput():
    t = timing.device_timing("cpu", {"time_to_n_s": 2.0, "units_per_step": 64, "unit": "tokens", "steps": [0.5, 0.1],
                                     "ops": {"fallback": {"aten::foo": 3}, "executed_total": 97}},
                             [[0.1, 0.2], [0.3]])
    assert t.steady == {"median_s": 0.2, "p90_s": timing.percentile([0.1, 0.2, 0.3], 90), "samples": 3, "rounds": 2}
    assert t.throughput_per_s == 64 / 0.2
    assert t.fallback_share == 0.03


def test_speedup_compares_time_to_n_steps():
    ref = timing.device_timing("cpu", {"time_to_n_s": 4.0}, [[1.0]])
    tgt = timing.device_timing("x", {"time_to_n_s": 2.0}, [[0.25]])
    result = timing.summarise(ref, tgt)
    assert result.speedup_time_to_n == 2.0 and result.speedup_steady == 4.0


def test_resume_matches_and_mismatches():
    ok = resume.judge([1.0, 0.9, 0.8, 0.7], {"step": 2, "losses": [0.8, 0.7]}, 1e-2)
    assert ok.status == "pass" and ok.exact
    bad = resume.judge([1.0, 0.9, 0.8, 0.7], {"step": 2, "losses": [0.8, 0.5]}, 1e-2)
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
