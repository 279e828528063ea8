"""A coverage row is typed on both sides of the worker boundary (a torchferry.records record): the worker builds a
``Row``, the parent rebuilds it from its JSON, and a field a row does not have is refused by name on either side."""

import json

import pytest

from torchferry.coverage import store
from torchferry.coverage.job import CoverageJob
from torchferry.harness.worker import Outcome
from torchferry.records import RecordError
from torchferry.report.coverage import Category, Mark, Row

JOB = CoverageJob(arch="llama", spec="llama", modes=("forward",), ref="cpu", target="neuron", seed=3)


def _row(**changes) -> Row:
    fields = dict(**JOB.base("forward"), category=Category.FAIL_FALLBACK, reason="host fallback: argmax", case_s=1.5,
                  fallback_ops={"aten::argmax": 8}, host_syncs={"item": 1}, phases={"build": 2.0}, baseline=Mark.NEW)
    return Row(**{**fields, **changes})


def test_a_row_survives_the_trip_from_worker_to_parent():
    row = _row()
    assert Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row


def test_the_parent_refuses_a_field_a_row_does_not_have_by_name():
    with pytest.raises(RecordError, match=r"unknown Row fields: fallbacks, timing \(fields: arch, mode, category, "):
        Row.from_dict({**_row().to_dict(), "fallbacks": {}, "timing": 1.0})


def test_the_parent_refuses_a_category_that_is_none_of_the_valid_ones():
    with pytest.raises(ValueError, match="'timeout' is not a valid Category"):
        Row.from_dict({**_row().to_dict(), "category": "timeout"})


def test_the_worker_builds_the_typed_row_and_fails_on_a_field_it_does_not_have():
    from torchferry.coverage.worker import row_of

    done = Outcome(value={**JOB.base("forward"), "category": Category.PASS, "reason": "1 checks"}, seconds=0.25)
    row = row_of(done, JOB.base("forward"))
    assert isinstance(row, Row) and (row.category, row.case_s) == (Category.PASS, 0.25)
    typo = Outcome(value={**JOB.base("forward"), "category": Category.PASS, "reason": "", "chekcs": 1})
    with pytest.raises(TypeError, match="chekcs"):  # the dataclass's own refusal, in the worker
        row_of(typo, JOB.base("forward"))


def test_a_store_line_with_an_unknown_field_is_named_as_corrupt(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = {"kind": "row", **_row().to_dict()}
    path.write_text(json.dumps({"kind": "meta"}) + "\n" + json.dumps(good) + "\n" + json.dumps({**good, "extra": 1}) + "\n")
    found = store.read(path)
    assert list(found.rows) == [JOB.case("forward")]
    (number, why), = found.corrupt
    assert number == 3 and why.startswith("RecordError: unknown Row fields: extra (fields: arch, mode, category, ")
