"""Terminal, JSON and HTML renderings of one result model; atomic writes; HTML in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from torchferry.report import htmlreport, jsonreport, text
from torchferry.report.core import ensure_writable, write_atomic
from torchferry.errors import OutputError

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
SECTIONS = ("next-actions", "verdicts", "parity", "rehearsal", "timing", "resume", "exit", "cost", "environment")
PLOTS = ("loss", "module-error", "eager-signatures", "warmup", "time-to-n", "cost")  # resume: its two curves coincide


def test_terminal_summary_leads_with_the_verdict_and_prints_assumptions(report):
    out = text.render(report, ["r.json"])
    lines = out.splitlines()
    # the verdict follows the run's header (what ran, how the target was chosen, how the mode runs) at once
    assert lines[0].startswith("ferry check: ") and lines[3].startswith("verdict: NO-GO: parity: first divergent module block"), lines[:4]
    # said once: the verdict line names the module with its figures, the parity details do not repeat it
    figures = "rmse vs fp64 0.5 (target) vs 2.54e-08 (ref)"
    assert "first divergent module block (" + figures in out and out.count(figures) == 1
    assert "assumption: cpu priced as g6e.xlarge" in out and "NO published on-demand price" in out
    assert "fix: save .cpu()" in out and out.rstrip().endswith("report: r.json")


def test_json_is_versioned_and_strict(report):
    data = json.loads(jsonreport.render(report), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert data["meta"]["format_version"] >= 1
    assert data["parity"]["first_divergent_module"]["name"] == "block"
    assert data["verdict"] == "no-go"


def test_html_is_self_contained_with_every_section_and_plot(report):
    html = htmlreport.render(report)
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html
    for plot in PLOTS:
        assert f'data-plot="{plot}"' in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html.split("<section id=\"cost\">")[0]  # no fetched resources (sources are cited as text)


def test_write_atomic_leaves_no_temp_file_and_a_readable_file(tmp_path):
    path = write_atomic(tmp_path / "sub" / "r.json", "{}")
    assert path.read_text() == "{}" and os.listdir(tmp_path / "sub") == ["r.json"]
    assert path.stat().st_mode & 0o044  # not mkstemp's 0600


def test_unwritable_folder_is_an_output_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="not writable"):
        ensure_writable(tmp_path / "f" / "out")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium); .ci/run installs it")
def test_html_renders_in_headless_chromium_with_sections_and_svg_plots(report, tmp_path):
    page = write_atomic(tmp_path / "report.html", htmlreport.render(report))
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in dom
    for plot in PLOTS:
        assert f'data-plot="{plot}"' in dom
    assert dom.count("<polyline") >= 4 and dom.count('class="bar"') >= 3
    assert 'id="first-divergent"' in dom
