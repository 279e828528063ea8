"""Precision and recall of every rule on a corpus of real-looking scripts (tests/scan/corpus/).

Each script's expected findings are in corpus/expected.toml, written by reading the scripts.
The test scans the corpus, counts per rule the findings that match an expected (file, line)
(true positives), the extra ones (false positives) and the missed ones (false negatives),
prints the table and holds each rule to the thresholds below. See the table:

    python -m pytest tests/scan/test_corpus.py -s -q
"""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

from torchferry.scan.rules import RULES
from torchferry.scan.sources import discover, scan_file

CORPUS = Path(__file__).parent / "corpus"
# Every rule that has findings (expected or reported) on the corpus must reach these.
MIN_PRECISION = 0.75
MIN_RECALL = 0.75
# And over all rules together:
MIN_OVERALL = 0.9


def _expected() -> Counter:
    """(file, rule id, line) -> how many findings belong there."""
    table = tomllib.loads((CORPUS / "expected.toml").read_text())
    return Counter((name, rule_id, line) for name, rules in table.items() for rule_id, lines in rules.items()
                   for line in lines)


def _found() -> Counter:
    results = [scan_file(path, RULES, fix=False, write=None) for path in discover([str(CORPUS)])]
    assert not [r.path for r in results if r.error], "a corpus script does not parse"
    return Counter((Path(f.path).name, f.rule_id, f.line) for r in results for f in r.findings)


def _table(expected: Counter, found: Counter) -> tuple[dict[str, tuple[int, int, int]], str]:
    counts = {}
    for rule in RULES:
        exp = Counter({k: v for k, v in expected.items() if k[1] == rule.id})
        got = Counter({k: v for k, v in found.items() if k[1] == rule.id})
        tp = sum((exp & got).values())
        counts[rule.id] = (tp, sum(got.values()) - tp, sum(exp.values()) - tp)
    rows = [f"{'rule':<6} {'name':<28} {'TP':>3} {'FP':>3} {'FN':>3} {'precision':>9} {'recall':>6}"]
    for rule in RULES:
        tp, fp, fn = counts[rule.id]
        precision = f"{tp / (tp + fp):.2f}" if tp + fp else "-"
        recall = f"{tp / (tp + fn):.2f}" if tp + fn else "-"
        rows.append(f"{rule.id:<6} {rule.name:<28} {tp:>3} {fp:>3} {fn:>3} {precision:>9} {recall:>6}")
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    rows.append(f"{'all':<35} {tp:>3} {fp:>3} {fn:>3} {tp / (tp + fp):>9.2f} {tp / (tp + fn):>6.2f}")
    return counts, "\n".join(rows)


def test_every_corpus_script_has_its_expected_findings():
    scripts = sorted(p.name for p in CORPUS.glob("*.py"))
    assert scripts == sorted(tomllib.loads((CORPUS / "expected.toml").read_text()))


def test_expected_rule_ids_exist():
    known = {rule.id for rule in RULES}
    assert {rule_id for _, rule_id, _ in _expected()} <= known


def test_precision_and_recall_per_rule_on_the_corpus():
    expected, found = _expected(), _found()
    counts, table = _table(expected, found)
    print("\n" + table)
    misses = sorted(set(expected - found))
    extras = sorted(set(found - expected))
    detail = f"\n{table}\nmissed: {misses}\nextra: {extras}"
    for rule_id, (tp, fp, fn) in counts.items():
        if tp + fp:
            assert tp / (tp + fp) >= MIN_PRECISION, f"{rule_id} precision below {MIN_PRECISION}{detail}"
        if tp + fn:
            assert tp / (tp + fn) >= MIN_RECALL, f"{rule_id} recall below {MIN_RECALL}{detail}"
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    assert tp / (tp + fp) >= MIN_OVERALL and tp / (tp + fn) >= MIN_OVERALL, detail


@pytest.mark.parametrize("rule_id", ["TF019", "TF020", "TF021", "TF022", "TF023", "TF024", "TF025", "TF026"])
def test_each_new_rule_is_exercised_by_the_corpus(rule_id):
    # a rule the corpus never expects would pass the thresholds vacuously
    assert any(k[1] == rule_id for k in _expected())
