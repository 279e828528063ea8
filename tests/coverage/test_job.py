"""The coverage job: typed on both sides of the worker boundary, with one key and one row base."""

import json

import pytest

from torchferry.coverage.job import DEFAULT_MEMORY_GIB, CoverageJob
from torchferry.report.coverage import Category, Row


def _job(**changes) -> CoverageJob:
    fields = dict(arch="t5", spec="t5", suite="seq2seq", modes=("forward", "train"), ref="cpu", target="neuron",
                  seed=3, compile="inductor", plugins=("/p/plugin.py",), memory_gib=4.0)
    return CoverageJob(**{**fields, **changes})


def test_a_job_survives_its_json_round_trip():
    job = _job()
    assert CoverageJob.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_an_unknown_field_is_refused_by_name():
    with pytest.raises(TypeError, match="unknown coverage job fields: memory_gb"):
        CoverageJob.from_dict({**_job().to_dict(), "memory_gb": 4})


def test_the_case_key_and_row_base_are_the_rows_own():
    job = _job()
    row = Row(**job.base("train"), category=Category.PASS, reason="")
    assert job.case("train") == row.case == "seq2seq/t5/train" and job.cases() == ["seq2seq/t5/forward", row.case]
    assert (row.device, row.ref, row.compile, row.suite) == ("neuron", "cpu", "inductor", "seq2seq")
    assert job.with_modes(["train"]).cases() == ["seq2seq/t5/train"] and job.name == "seq2seq/t5"


def test_the_memory_limit_defaults_once():
    assert _job(memory_gib=None).memory_limit_gib == DEFAULT_MEMORY_GIB and _job().memory_limit_gib == 4.0


def test_a_modes_compile_phase_starts_at_zero_not_at_the_previous_modes_figure():
    # A mode that fails before it compiles (its reference, its build) must not report the previous
    # mode's Dynamo compilations as its own `phases.compile`.
    from torch._dynamo.utils import compilation_time_metrics

    from torchferry.coverage.worker import Case

    case = Case(_job(arch="llama", spec="llama", suite="causal-lm", plugins=()))
    compilation_time_metrics["_compile.compile_inner"] = [4.0, 2.5]  # what the first mode compiled
    assert case.phases()["compile"] == 6.5
    case.start_row("train")
    assert case.phases() == {"first_call": None, "compile": 0.0}
