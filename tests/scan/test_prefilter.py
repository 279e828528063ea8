"""Rule prefilters and gates (the cheap tests that decide which rules run, and whether libcst parses a
source at all) never change what the scan finds or how it reports a source that does not parse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import libcst as cst
import pytest

from torchferry.scan.engine import analyse, candidate_rules
from torchferry.scan.rules import RULES
from torchferry.scan.sources import discover

HERE = Path(__file__).parent
UNFILTERED = [dataclasses.replace(rule, prefilter=None, gate=None) for rule in RULES]
SOURCES = [p for p in discover([str(HERE / "corpus"), str(HERE / "data")]) if p.suffix == ".py"]


def _hits(code: str, rules) -> list[tuple]:  # noqa: ANN001 - a rule list
    hits, fixed = analyse(code, rules, fix=True)
    return [(h.line, h.column, h.rule.id, h.hit.message, h.hit.fix is not None) for h in hits] + [fixed]


def test_every_rule_has_a_prefilter():
    """A rule without one makes every source go through libcst; a new rule should say what it needs."""
    assert [rule.id for rule in RULES if rule.prefilter is None] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_prefilters_change_no_finding_and_no_fix(path):
    code = path.read_text()
    assert _hits(code, RULES) == _hits(code, UNFILTERED)


def test_a_rule_whose_prefilter_does_not_match_does_not_run():
    assert candidate_rules("import os\nprint(os.sep)\n", RULES) == []
    assert [r.id for r in candidate_rules("x = y.cuda()\n", RULES) if r.id == "TF001"] == ["TF001"]


@pytest.mark.parametrize("code", ["x = (\n", "def f(:\n    pass\n", "import os\nos.sep +\n"])
def test_a_source_without_candidates_that_does_not_parse_fails_as_libcst_says(code):
    with pytest.raises(cst.ParserSyntaxError) as expected:
        cst.parse_module(code)
    with pytest.raises(cst.ParserSyntaxError) as got:
        analyse(code, RULES, fix=False)
    assert str(got.value) == str(expected.value)
