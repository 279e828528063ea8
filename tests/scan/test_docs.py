"""docs/scan.md's rule table is the rule table: every rule's row, as `RULES` would write it."""

from pathlib import Path

import pytest

from torchferry.scan.rules import RULES

DOC = (Path(__file__).parents[2] / "docs" / "scan.md").read_text()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_the_docs_show_each_rule_as_it_is(rule):
    row = (f"| `{rule.id}` | {rule.name} | {rule.severity.value} | {rule.summary} | {rule.fix} | "
           f"{rule.safe_fix or 'no (report only)'} |")
    assert row in DOC, f"regenerate the rule table in docs/scan.md: {row}"
