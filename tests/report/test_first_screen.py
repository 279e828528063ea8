"""The HTML report leads with what decides: verdict, next actions, then the deciding result, on the first screen of
headless Chromium; results that carry no information (all-pass parity rows, coinciding curves, all-1.0 bars) fold."""

from __future__ import annotations

import json
import struct
import subprocess

import pytest
import torch

from torchferry.check import verdict
from torchferry.harness import parity
from torchferry.report import htmlreport
from torchferry.report.check import ExitFormat, ExitResult
from torchferry.report.core import write_atomic

from test_renderers import CHROMIUM

SCREEN = (1280, 900)  # a laptop browser window: what "the first screen" means here
MEASURE = """<script>
const box = id => { const e = document.getElementById(id); if (!e) return null;
  const r = (e.querySelector('h2') || e).getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
const out = {screen: window.innerHeight};
for (const id of ['verdict', 'next-actions', 'rehearsal', 'timing', 'verdicts', 'parity'])
  out[id] = box(id);
const list = document.querySelector('#next-actions ol, #next-actions p');
out['next-actions-list'] = list ? {top: list.getBoundingClientRect().top, bottom: list.getBoundingClientRect().bottom} : null;
const pre = document.createElement('pre'); pre.id = 'layout'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


@pytest.fixture
def emulated_go_with_conditions(report):
    """The shape the issue saw: an emulated target whose parity passes everywhere (64 module rows, three coinciding
    loss curves, every error ratio 1.0), a clean rehearsal, checkpoints that need map_location, an unpriced reference."""
    torch.manual_seed(0)
    golden = {f"model.layers.{i}.mlp": torch.randn(500, dtype=torch.float64) for i in range(64)}
    same = {n: g.float() for n, g in golden.items()}
    report.parity.status = "pass"
    report.parity.deterministic = True
    report.parity.outputs = [parity.compare("logits", same["model.layers.63.mlp"], same["model.layers.63.mlp"],
                                            golden["model.layers.63.mlp"], 1e-2)]
    report.parity.modules, report.parity.first_divergent_module = parity.localise(same, same, golden, 1e-2, False)
    curve = [2.0, 1.5, 1.2]
    report.parity.loss_curve = {"ref": curve, "target": curve, "fp64": curve, "comparison": parity.compare(
        "loss curve", torch.tensor(curve), torch.tensor(curve), torch.tensor(curve, dtype=torch.float64), 1e-2)}
    report.rehearsal.fallbacks, report.rehearsal.conditions, report.rehearsal.status = [], [], "clean"
    report.rehearsal.fallback_calls, report.rehearsal.fallback_share_of_calls = 0, 0.0
    report.rehearsal.fallback_share_of_time = 0.0
    report.rehearsal.new_signatures = [0, 0]
    report.exit = ExitResult(status="conditions", torchferry_absent=True, loader_device="cpu", formats=[
        ExitFormat("torch.save state dict", saved=True, location_tags=["neuron:0"], needs_map_location=True,
                   fix="device-tagged storages (neuron:0): save a .cpu() copy")])
    report.cost.break_even = {"status": "not computed: the reference has no price (pass --ref-instance NAME)"}
    verdict.decide(report)
    assert report.verdict == "go-with-conditions"
    return report


def test_parity_rows_that_all_pass_fold_and_flat_charts_become_sentences(emulated_go_with_conditions):
    html = htmlreport.render(emulated_go_with_conditions)
    parity_html = html.split('<section id="parity">')[1].split("</section>")[0]
    assert '<details id="parity-passing"><summary>All 66 parity checks pass' in parity_html  # 1 output, the loss curve, 64 modules
    assert "failing check" not in parity_html
    assert 'data-plot="loss"' not in html and "loss curves of ref cpu, target neuron, fp64 golden coincide" in html
    assert 'data-plot="module-error"' not in html and "is 1.00 (64 modules)" in html
    assert 'data-plot="resume"' not in html and "resumed and uninterrupted losses coincide" in html


def test_conditions_none_never_stands_beside_a_conditional_verdict(emulated_go_with_conditions):
    html = htmlreport.render(emulated_go_with_conditions)
    rehearsal = html.split('<section id="rehearsal">')[1].split("</section>")[0]
    assert "<p>None.</p>" not in rehearsal
    assert "the verdict's conditions come from other results (Next actions)" in rehearsal


def test_next_actions_list_every_condition_with_its_fix(emulated_go_with_conditions):
    actions = [(a.result, a.action) for a in emulated_go_with_conditions.next_actions]
    assert ("exit", "torch.save state dict: device-tagged storages (neuron:0): save a .cpu() copy") in actions
    assert ("cost", "break-even not computed: the reference has no price (pass --ref-instance NAME)") in actions


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium); .ci/run installs it")
def test_the_first_screen_shows_verdict_next_actions_and_the_rehearsal(emulated_go_with_conditions, tmp_path):
    html = htmlreport.render(emulated_go_with_conditions)
    page = write_atomic(tmp_path / "report.html", html)
    window = f"--window-size={SCREEN[0]},{SCREEN[1]}"
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--hide-scrollbars", window]
    shot = tmp_path / "first-screen.png"
    proc = subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert struct.unpack(">II", shot.read_bytes()[16:24]) == SCREEN  # the PNG is the first screen, not the page
    # the same page measured in the same window: the report has no script, so the measuring copy gets one
    measured = write_atomic(tmp_path / "measured.html", html.replace(
        html[html.index('<meta http-equiv="Content-Security-Policy"'):html.index("<title>")], "")
        .replace("</body>", MEASURE + "</body>"))
    proc = subprocess.run([*common, "--dump-dom", measured.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    layout = json.loads(proc.stdout.split('<pre id="layout">')[1].split("</pre>")[0])
    screen = layout["screen"]
    assert layout["verdict"]["bottom"] <= screen
    assert layout["next-actions-list"]["bottom"] <= screen  # every next action, not just the heading
    assert layout["rehearsal"]["bottom"] <= screen  # the result that decides an emulated target
    assert layout["next-actions"]["top"] < layout["rehearsal"]["top"] < layout["verdicts"]["top"] < layout["parity"]["top"]
    assert layout["rehearsal"]["top"] < layout["timing"]["top"]  # the emulation's host times come later
