"""Scripts that end unusually, and the likeliest slips with `ferry check -- COMMAND`: each answered with the documented
exit code and one paragraph naming what failed and the fix, nothing measured lost (issue 47's hostile cases)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ferryrun import ferry, signal_ferry_when

ROOT = Path(__file__).resolve().parents[2]


def script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text("import os, signal, sys, time\nimport torch\n"
                    "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
                    "else torch.device('cpu')\n"
                    "model = torch.nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                    "def step():\n    opt.zero_grad(); model(torch.ones(2, 4, device=device)).sum().backward(); opt.step()\n"
                    + body)
    return path


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "rep" / "report.json").read_text())


def test_a_script_given_without_its_interpreter_is_a_usage_error_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script(tmp_path, "step()\n")
    code, _, err = ferry("check", "--", "train.py")
    assert code == 2 and err.startswith("ferry check: 'train.py' is a file, not a command")
    assert "`ferry check -- python train.py`" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_script_that_leaves_with_os_exit_after_training_is_judged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script(tmp_path, "for _ in range(3):\n    step()\ntorch.save(model.state_dict(), 'm.pt')\nos._exit(0)\n")
    code, out, err = ferry("check", "--target", "neuron", "-o", "rep", "--", "python", "train.py")
    assert code == 0, out + err
    assert report(tmp_path)["script"]["optimizer_steps"] == 3 and report(tmp_path)["parity"]["status"] == "pass"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_script_that_ignores_sigterm_keeps_its_steps_when_it_is_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script(tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nfor _ in range(2):\n    step()\n"
                     "print('waiting', flush=True)\nwhile True:\n    time.sleep(0.1)\n")
    code, out, err = ferry("check", "--target", "neuron", "--timeout", "30", "-o", "rep", "--", "python", "train.py")
    assert code == 8, out + err
    r = report(tmp_path)
    assert r["failure"]["kind"] == "timeout" and r["timing"]["ref"]["time_to_n_s"] > 0  # its two steps were kept
    assert r["timing"]["ref"]["steps"] == []  # its step 2 ran under the FLOP counter: no step-to-step time to show
    assert r["timing"]["step_unit"].endswith("(cut short)")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_to_ferry_is_named_as_sigterm_and_the_report_is_written(tmp_path):
    script(tmp_path, "for _ in range(2):\n    step()\nprint('waiting', flush=True)\nwhile True:\n    time.sleep(0.1)\n")
    code, out, err = signal_ferry_when(["check", "--target", "neuron", "-o", "rep", "--", "python", "train.py"], tmp_path,
                                       tmp_path / "rep" / "work" / "ref.log", "waiting", signal.SIGTERM)
    assert code == 130, out + err
    r = report(tmp_path)
    assert r["failure"]["kind"] == "interrupted" and "SIGTERM" in r["failure"]["message"]
    assert "Ctrl-C" not in r["failure"]["message"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_what_is_piped_into_ferry_reaches_every_run_of_the_script(tmp_path):
    script(tmp_path, "n = int(sys.stdin.readline())\nfor _ in range(n):\n    step()\n")
    done = subprocess.run([sys.executable, "-m", "torchferry", "check", "--target", "neuron", "-o", "rep", "--",
                           "python", "train.py"], cwd=tmp_path, input="3\n", capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert report(tmp_path)["script"]["optimizer_steps"] == 3


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.timeout(1200)
def test_a_rank_that_raises_on_the_target_is_the_finding_and_the_others_are_collateral(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ddp.py").write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group()\n"
        "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device('cpu')\n"
        "if device.type != 'cpu':\n    device = torch.device(device.type, int(os.environ['LOCAL_RANK']))\n"
        "model = torch.nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(3):\n"
        "    opt.zero_grad(); model(torch.ones(2, 4, device=device)).sum().backward()\n"
        "    for p in model.parameters():\n        dist.all_reduce(p.grad)\n"
        "    if step == 1 and dist.get_rank() == 1 and device.type != 'cpu':\n"
        "        raise RuntimeError('planted: rank 1 fails on the accelerator')\n"
        "    opt.step()\n"
        "dist.destroy_process_group()\n")
    code, out, err = ferry("check", "--target", "neuron", "-o", "rep", "--", "torchrun", "--nproc-per-node", "2", "ddp.py")
    assert code == 3, out + err
    message = report(tmp_path)["failure"]["message"]
    assert "on rank 1 at" in message and "ddp.py:13" in message and "planted: rank 1 fails" in message
    assert "Rank 1 raised first; then rank 0" in message and "collateral" in message
