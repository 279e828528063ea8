"""The script recorders (check/script/recorder.py) in a plain CPU process.

Each test runs a small script in a fresh interpreter whose environment switches the recorders on;
the script calls ``autoload()`` itself right after ``import torch`` (what the ``torch.backends``
entry point does in an installed torchferry), so these tests do not depend on the install.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from torchferry.check.script import recorder as rec

PRELUDE = """
import torch
from torchferry.check.script import recorder
recorder.autoload()
"""
TRAIN = """
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range({steps}):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


def run_script(tmp_path: Path, body: str, *, env: dict | None = None, timeout: float = 120) -> tuple[int, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "s.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    folder = tmp_path / "records"
    full_env = {**os.environ, rec.RECORD_ENV: str(folder), **(env or {})}
    full_env.pop("TORCHFERRY_DEVICE", None)
    proc = subprocess.run([sys.executable, str(script)], env=full_env, cwd=tmp_path, timeout=timeout,
                          capture_output=True, text=True)
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("record-*.json"))]
    return proc.returncode, records


@pytest.mark.timeout(300)
def test_losses_steps_grad_norms_and_parameters_are_recorded(tmp_path):
    code, [r] = run_script(tmp_path, TRAIN.format(steps=3))
    assert code == 0
    assert r["steps"] == 3 and len(r["losses"]) == 3 and r["loss_steps"] == [0, 1, 2]
    assert len(r["grad_norms"]) == 3 and all(n > 0 for n in r["grad_norms"])
    assert len(r["step_ends_s"]) == 3 and r["stopped"] is None and r["device"] == "cpu"
    [params] = r["parameters"]  # one optimizer stepped
    assert params["count"] == 2 and len(params["digests"]) == 2
    assert r["rehearsal"] is None  # the CPU emulates nothing
    assert r["script_seeded"] is False


@pytest.mark.timeout(300)
def test_steps_stops_cleanly_after_n_optimizer_steps(tmp_path):
    code, [r] = run_script(tmp_path, TRAIN.format(steps=50) + "\nraise RuntimeError('not reached')\n",
                           env={rec.STEPS_ENV: "2"})
    assert code == 0
    assert r["steps"] == 2 and r["stopped"] == "--steps 2" and len(r["losses"]) == 2


@pytest.mark.timeout(300)
def test_the_reference_counts_its_second_steps_flops_without_changing_a_number(tmp_path):
    # Linear(4, 1) on 8 rows: the forward's addmm 2*8*4*1 = 64 FLOPs, the weight's gradient (mm) 64; x needs no grad
    code, [r] = run_script(tmp_path / "linear", TRAIN.format(steps=3), env={rec.FLOPS_ENV: "1"})
    assert code == 0 and r["flops_per_step"] == 128 and r["counted_step"] == 2
    attention = """
torch.manual_seed(0)
model = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4, 8, 16)
for step in range(3):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
"""
    _, [plain] = run_script(tmp_path / "plain", attention)
    _, [counted] = run_script(tmp_path / "counted", attention, env={rec.FLOPS_ENV: "1"})
    assert plain["flops_per_step"] is None and counted["flops_per_step"] > 0
    # counted, step 2 ran every op as called: the same losses and final parameters bit for bit
    assert counted["losses"] == plain["losses"] and counted["parameters"] == plain["parameters"]
    # two optimizers (a GAN's pattern): one iteration is counted, each optimizer's step once, then per step.
    # A's step: Linear(4, 1) 64 + 64; B's: Linear(4, 3) 192 + 192. Steps 2 (B) and 3 (A): (384 + 128) / 2
    two = """
a, b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 3)
opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
x = torch.randn(8, 4)
for step in range(3):
    for model, opt in ((a, opt_a), (b, opt_b)):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
"""
    _, [r] = run_script(tmp_path / "two", two, env={rec.FLOPS_ENV: "1"})
    assert r["flops_per_step"] == 256 and r["counted_step"] == 2 and r["steps_counted"] == 2


@pytest.mark.timeout(300)
def test_flops_are_not_counted_in_a_compiled_script_nor_one_stopped_at_its_first_step(tmp_path):
    compiled = TRAIN.replace("opt = ", "model = torch.compile(model, backend='eager')\nopt = ")
    code, [r] = run_script(tmp_path / "compiled", compiled.format(steps=3), env={rec.FLOPS_ENV: "1"})
    assert code == 0 and r["flops_per_step"] is None and "torch.compile" in r["flops_skipped"]
    code, [r] = run_script(tmp_path / "one", TRAIN.format(steps=5), env={rec.FLOPS_ENV: "1", rec.STEPS_ENV: "1"})
    assert code == 0 and r["flops_per_step"] is None and r["counted_step"] is None and r["steps"] == 1


@pytest.mark.timeout(300)
def test_checkpoints_from_torch_save_and_safetensors_are_recorded(tmp_path):
    body = TRAIN.format(steps=1) + """
torch.save(model.state_dict(), "a.pt")
from safetensors.torch import save_file
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, "b.safetensors")
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0
    assert [(Path(c["path"]).name, c["how"], c["step"]) for c in r["checkpoints"]] == [
        ("a.pt", "torch.save", 1), ("b.safetensors", "safetensors", 1)]


@pytest.mark.timeout(300)
def test_seeding_at_start_and_the_scripts_own_seed(tmp_path):
    _, [a] = run_script(tmp_path / "a", TRAIN.format(steps=1), env={rec.SEED_ENV: "5"})
    _, [b] = run_script(tmp_path / "b", TRAIN.format(steps=1), env={rec.SEED_ENV: "5"})
    assert a["seed"] == 5 and a["script_seeded"] is False
    assert a["losses"] == b["losses"]  # seeded at start: the unseeded script repeats itself
    _, [own] = run_script(tmp_path / "c", "torch.manual_seed(0)\n" + TRAIN.format(steps=1))
    assert own["script_seeded"] is True


@pytest.mark.timeout(300)
def test_the_noise_run_moves_every_parameter_by_one_ulp_and_keeps_every_seed(tmp_path):
    body = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x, y = torch.randn(64, 64), torch.randn(64, 1)
for step in range(8):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""
    _, [a] = run_script(tmp_path / "a", body)
    _, [b] = run_script(tmp_path / "b", body, env={rec.NOISE_ENV: "1"})
    _, [c] = run_script(tmp_path / "c", body)
    assert a["losses"] == c["losses"]  # the same seed: the same run
    assert a["losses"] != b["losses"]  # one ulp moved: the reference's own rounding noise
    assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a["losses"], b["losses"]))  # and only that
    assert b["noise"] is True and b["script_seeded"] is True


@pytest.mark.timeout(300)
def test_the_first_forward_and_backward_are_traced_module_by_module(tmp_path):
    body = """
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 4)).sum().backward()
opt.step()
model(torch.randn(2, 4)).sum().backward()
torch.save(model, "whole.pt")  # hooks of the recorder's are kept on no module: a whole model still pickles
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0
    m = r["modules"]
    assert [s["name"] for s in m["forward"]] == ["0", "1", "2", "<model>"]  # execution order, inner first
    assert [s["name"] for s in m["grads"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert m["forward"][0]["module_class"] == "Linear" and m["forward"][0]["where"].endswith(".py:" + m["forward"][0]["where"].rsplit(":", 1)[1])
    assert len(m["forward"][0]["values"]) == 18 and m["forward"][0]["numel"] == 6
    assert r["parameters"][0]["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


@pytest.mark.timeout(300)
def test_an_uncaught_error_is_recorded_with_the_users_line(tmp_path):
    body = TRAIN.format(steps=1) + "x = torch.ones(2) @ torch.ones(3)\n"
    code, [r] = run_script(tmp_path, body)
    assert code == 1
    e = r["error"]
    assert e["file"].endswith("s.py") and e["code"] == "x = torch.ones(2) @ torch.ones(3)" and e["step"] == 1
    assert e["placement"] is None
    assert "Traceback" in e["traceback"] and r["stopped"] == "error" and r["steps"] == 1


@pytest.mark.timeout(300)
def test_sigterm_writes_what_was_recorded(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(PRELUDE + TRAIN.format(steps=2) + "\nimport sys\nprint('ready', flush=True)\nsys.stdin.readline()\n")
    env = {**os.environ, rec.RECORD_ENV: str(tmp_path / "records")}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    [r] = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("record-*.json")]
    assert r["stopped"] == "terminated" and r["steps"] == 2


@pytest.mark.timeout(300)
def test_a_process_that_does_no_training_writes_no_record(tmp_path):
    code, records = run_script(tmp_path, "y = torch.ones(2) * 2\n")
    assert code == 0 and records == []  # launchers and helper processes leave no record


@pytest.mark.timeout(300)
def test_a_checkpoint_saved_through_an_open_file_is_recorded_and_a_buffer_is_not(tmp_path):
    body = TRAIN.format(steps=1) + """
import io
with open("through_file.pt", "wb") as f:
    torch.save(model.state_dict(), f)
torch.save(model.state_dict(), io.BytesIO())
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0
    assert [(Path(c["path"]).name, c["how"]) for c in r["checkpoints"]] == [("through_file.pt", "torch.save")]


@pytest.mark.timeout(300)
def test_each_optimizer_that_stepped_has_its_final_parameters(tmp_path):
    body = """
g, d = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
og, od = torch.optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(d.parameters(), lr=0.1)
for _ in range(2):
    od.zero_grad(); d(g(torch.randn(4, 2)).detach()).mean().backward(); od.step()
    og.zero_grad(); d(g(torch.randn(4, 2))).mean().backward(); og.step()
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0 and r["steps"] == 4 and r["backwards"] == 4
    assert [p["numel"] for p in r["parameters"]] == [4, 9]  # the discriminator stepped first, then the generator


@pytest.mark.timeout(300)
def test_the_floating_buffers_of_the_models_that_stepped_are_recorded_by_name_and_kept_whole(tmp_path):
    body = """
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0
    # running_mean and running_var; num_batches_tracked is an integer count, outside the float parity rule
    assert r["buffers"]["names"] == ["1.running_mean (BatchNorm1d)", "1.running_var (BatchNorm1d)"]
    [kept] = (tmp_path / "records").glob("record-*.pt")
    tensors = torch.load(kept, weights_only=True)
    assert [list(t.shape) for t in tensors["buffers"]] == [[3], [3]]
    assert not torch.equal(tensors["buffers"][0], torch.zeros(3))  # the statistics the training moved
    assert [len(group) for group in tensors["parameters"]] == [4]


@pytest.mark.timeout(300)
def test_a_gans_generator_first_run_after_the_first_backward_has_its_buffers_recorded(tmp_path):
    body = """
g = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
d = torch.nn.Linear(3, 1)
og, od = torch.optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(d.parameters(), lr=0.1)
ema = torch.nn.BatchNorm1d(3)  # holds no parameter an optimizer steps: not a model of the run
for _ in range(2):
    od.zero_grad(); d(torch.randn(4, 3)).mean().backward(); od.step()
    og.zero_grad(); d(g(torch.randn(4, 2))).mean().backward(); og.step()
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0
    assert r["buffers"]["names"] == ["Sequential.1.running_mean (BatchNorm1d)",
                                     "Sequential.1.running_var (BatchNorm1d)"]


@pytest.mark.timeout(300)
def test_a_script_that_only_evaluates_records_no_buffers(tmp_path):
    body = """
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
loss = model(torch.randn(8, 4)).pow(2).mean()
loss.backward()
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0 and r["buffers"] is None  # no optimizer stepped: its state is not the script's result


@pytest.mark.timeout(300)
def test_a_compiled_model_trains_as_without_the_recorders(tmp_path):
    """`model = torch.compile(model)`: dynamo traced the recorders' global module hooks into the graph (a summary taken
    there, a digest reading a tensor's bytes, broke the user's compiled forward), guarded on their number (removing
    the module trace after the first backward recompiled the graph: a false recompilation in the rehearsal) and warned
    about them at every call. The hooks now stand aside from the script's torch.compile on."""
    body = """
import warnings
warnings.filterwarnings("error", message=".*global hooks")  # PyTorch's warning about global module hooks
from torch._dynamo.utils import counters
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)),
                      backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for _ in range(3):
    opt.zero_grad(); ((model(x) - y) ** 2).mean().backward(); opt.step()
open("graphs", "w").write(str(counters["stats"]["unique_graphs"]))
"""
    code, [r] = run_script(tmp_path, body)
    assert code == 0 and r["error"] is None, r["error"]
    assert r["steps"] == 3 and len(r["losses"]) == 3
    assert (tmp_path / "graphs").read_text() == "1"  # one graph: nothing of torchferry's made it recompile


@pytest.mark.timeout(300)
def test_os_exit_after_training_still_writes_the_record(tmp_path):
    code, [r] = run_script(tmp_path, TRAIN.format(steps=2) + "\nimport os\nos._exit(0)\n")
    assert code == 0 and r["steps"] == 2 and r["parameters"]


@pytest.mark.timeout(300)
def test_a_script_that_ignores_sigterm_still_leaves_its_record_on_the_flush_signal(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(PRELUDE + TRAIN.format(steps=2) + "\nimport signal, sys, time\nsignal.signal(signal.SIGTERM, "
                      "signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(120)\n")
    env = {**os.environ, rec.RECORD_ENV: str(tmp_path / "records")}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(rec.FLUSH_SIGNAL)

        def steps() -> int:
            found = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("record-*.json")]
            return found[0]["steps"] if found else 0

        deadline = time.monotonic() + 30
        while steps() < 2 and time.monotonic() < deadline:  # a step end may have written an earlier record
            time.sleep(0.1)
        [r] = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("record-*.json")]
        assert r["steps"] == 2 and len(r["losses"]) == 2 and r["stopped"] is None  # the script goes on
    finally:
        proc.kill()
        proc.wait()
