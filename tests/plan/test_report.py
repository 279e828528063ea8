"""The plan's renderers: the terminal table, versioned JSON written atomically, and the HTML section
with one stacked bar per layout against the capacity line. Built from a result model by hand:
nothing is traced here."""

from __future__ import annotations

import json
import re

import pytest

from torchferry.harness.prices import load_prices
from torchferry.plan.layout import make_layout
from torchferry.plan.roofline import peaks, reference_bounds, target_bounds
from torchferry.report import plan_render as render
from torchferry.report.core import write_reports
from torchferry.report.meta import new_meta
from torchferry.report.plan import CATEGORIES, FORMAT, FORMAT_VERSION, GIB, LayoutResult, PlanReport, StepTrace, rank

CAPACITY = 24 * GIB


def _trace(gib_by_category: dict[str, float]) -> StepTrace:
    breakdown = {c: int(gib_by_category.get(c, 0) * GIB) for c in CATEGORIES}
    return StepTrace(peak_bytes=sum(breakdown.values()), breakdown=breakdown, tracker={}, flops=int(2.5e14),
                     op_bytes=int(8e11), collectives={"all_gather": {"calls": 65, "bytes": int(3e10), "wire_bytes": int(2.9e10)}},
                     trace_s=1.0)


@pytest.fixture
def report() -> PlanReport:
    table = load_prices()
    target, reference = peaks(table, "trn2.48xlarge", "bfloat16"), peaks(table, "p5.48xlarge", "bfloat16", need_links=False)
    results = []
    for tp, ac, sizes in ((1, "off", {"parameters": 2.4, "optimizer state": 0.9, "activations": 26.0, "temporaries": 4.0}),
                          (1, "on", {"parameters": 2.4, "gradients": 0.4, "optimizer state": 0.9, "activations": 1.0,
                                     "temporaries": 7.0})):
        layout = make_layout(64, None, tp, ac, 1, None, 4096, "bf16-mixed", "adamw")
        trace = _trace(sizes)
        results.append(LayoutResult(layout=layout, trace=trace, capacity_bytes=CAPACITY,
                                    bounds=target_bounds(trace, layout, target),
                                    reference=reference_bounds(trace, layout, reference)))
    model = {"kind": "builtin", "name": "Llama-3-8B", "source": "https://example.org/config.json", "spec": None,
             "shape": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                       "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False}}
    return PlanReport(meta=new_meta(FORMAT, FORMAT_VERSION, ["plan", "--search"]), model=model,
                      capacity={"bytes": CAPACITY, "source": "test"}, target=target, reference=reference,
                      layouts=rank(results), searched=True)


def test_ranking_puts_layouts_that_fit_first(report):
    assert [r.layout.checkpointing for r in report.layouts] == ["on", "off"]
    assert report.best.layout.checkpointing == "on"
    assert report.layouts[1].verdict == "does not fit by 9.30 GiB"
    assert report.layouts[0].verdict == "fits with 12.30 GiB headroom"


def test_text_table_has_a_row_per_layout_with_verdict_bounds_and_sources(report):
    text = render.render_text(report, ["out/plan.json"])
    assert "Llama-3-8B: hidden 4096, 32 layers, 32 heads, 8 kv heads, MLP 14336, vocab 128256" in text
    assert re.search(r"FSDP 64 x TP 1, AC on\s+11\.70\s+2\.40\s+0\.40\s+0\.90\s+1\.00\s+7\.00\s+fits with 12\.30 GiB", text)
    assert "does not fit by 9.30 GiB" in text
    assert "best: FSDP 64 x TP 1, AC on" in text
    assert "10% $" in text and "60% $" in text and "reference p5.48xlarge" in text
    assert "trn2-arch.html" in text and "nvidia.com" in text  # every peak figure's source
    assert "not measurements of Trainium" in text
    assert "reports: out/plan.json" in text


def test_json_is_versioned_and_written_atomically(report, tmp_path):
    paths = write_reports(report, render.REPORTERS, tmp_path)
    assert sorted(p.name for p in paths) == ["plan.html", "plan.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left behind
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["meta"]["format"] == "torchferry.plan" and data["meta"]["format_version"] == FORMAT_VERSION
    assert data["meta"]["command"] == "ferry plan --search"
    first = data["layouts"][0]
    assert first["fits"] is True and first["layout"]["label"] == "FSDP 64 x TP 1, AC on"
    assert first["breakdown_bytes"]["temporaries"] == int(7.0 * GIB)
    assert set(first["bounds"]["cost_at_utilisation"]) == {"10%", "25%", "40%", "60%"}
    assert first["reference"]["instance"] == "p5.48xlarge"


def test_html_draws_one_stacked_bar_per_layout_against_the_capacity_line(report):
    html = render.render_html(report)
    svg = re.search(r'<svg class="plot" data-plot="plan-memory".*?</svg>', html, re.S).group(0)
    segments = re.findall(r'<rect class="segment" data-layout="([^"]+)" data-category="([^"]+)" x="[\d.]+" '
                          r'y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', svg)
    assert len(segments) == 2 * len(CATEGORIES)
    capacity_y = float(re.search(r'<line class="capacity" x1="[\d.]+" y1="([\d.]+)"', svg).group(1))
    for label in ("FSDP 64 x TP 1, AC on", "FSDP 64 x TP 1, AC off"):
        mine = [s for s in segments if s[0] == label]
        top = min(float(y) for _, _, y, _ in mine)
        fits = label.endswith("on")
        assert (top >= capacity_y) == fits, label  # a bar that fits stays below the line (SVG y grows downwards)
    heights = {c: float(h) for layout, c, _, h in segments if layout.endswith("AC off")}
    assert heights["activations"] == pytest.approx(heights["temporaries"] * 26.0 / 4.0, rel=0.01)
    assert "capacity 24.0 GiB" in svg
    assert '<section id="plan">' in html and "Sources and assumptions" in html


def test_validation_is_reported_as_the_built_in_device_with_its_error(report):
    from torchferry.plan.validate import compare

    layout = report.layouts[0].layout
    report.validations.append(compare(layout, 105 * 2**20, [{"peak_bytes": 100 * 2**20, "device": "neuron:0"},
                                                             {"peak_bytes": 98 * 2**20, "device": "neuron:1"}]))
    validation = report.validations[0]
    assert validation.error == pytest.approx(0.05) and validation.passed  # against the worst rank
    text = render.render_text(report)
    assert ("validate FSDP 64 x TP 1, AC on: predicted 105.00 MiB, measured on the built-in neuron device "
            "100.00, 98.00 MiB per rank: error +5.00% (within 10%)") in text
    html = render.render_html(report)
    assert "measured on the built-in device" in html and "+5.00%" in html and "yes (±10%)" in html
    assert compare(layout, 120 * 2**20, [{"peak_bytes": 100 * 2**20, "device": "neuron:0"}]).passed is False
