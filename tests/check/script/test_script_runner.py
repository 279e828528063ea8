"""`ferry check -- COMMAND`: the user's own, unchanged script, cpu -> the built-in neuron.

Fast tests: the command's validation (usage errors before anything starts) and the child
environments. Slow tests run the command end to end (one run per module-scoped fixture, judged
by several tests): the plain loop example, the planted failure scripts.

The children record through torchferry's second ``torch.backends`` entry point
(``torchferry_record``); an install that predates it (an editable install not refreshed since)
cannot record, and the end-to-end tests say so in their skip reason.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from ferryrun import ferry, signal_ferry_when

from torchferry.check.convergence import (Curves, Floor, ModuleTrace, Summary, curve, first_divergent, judge,
                                          precision_difference, shape_difference)
from torchferry.check.exit import CheckpointWrite, checkpoints
from torchferry.check.script.environment import script_environment
from torchferry.check.script.recorder import graph_metadata
from torchferry.check.sources import parse_command
from torchferry.errors import UsageError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
PLANTED = Path(__file__).with_name("scripts")
RECORDER_INSTALLED = any(e.name == "torchferry_record" for e in importlib.metadata.entry_points(group="torch.backends"))
needs_recorder = pytest.mark.skipif(
    not RECORDER_INSTALLED, reason="the torchferry_record entry point is not installed in this environment: refresh the "
                                   "install (pip install --no-build-isolation -e .) so that children record")


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["check", "--"], "no command after `--`"),
    (["check", "--", "  "], "no command after `--`"),
    (["check", "--", "python", "no/such/train.py"], "does not exist"),
    (["check", "--", "python"], "runs no script file or module"),
    (["check", "--", "python", "-c", "print(1)"], "runs no script file or module"),
    (["check", "--", "accelerate", "config"], "only `accelerate launch"),
    (["check", "--", "no-such-launcher-xyz", "train.py"], "no such command or file"),
    (["check", "--", "python", "t.py", "--device", "{dev}"], "{dev} in the command is no placeholder"),
])
def test_bad_commands_are_usage_errors_before_anything_starts(argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = ferry(*argv)
    assert code == 2, err
    assert words in err
    assert not (tmp_path / "ferry-report").exists()  # nothing ran, nothing was written


def test_mode_other_than_train_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("pass\n")
    code, _, err = ferry("check", "--mode", "forward", "--", "python", "t.py")
    assert code == 2 and "--mode does not apply to a script" in err and "checked as it trains" in err


def test_parse_recognises_the_launchers(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    plain = parse_command(["--", "python", "train.py", "--lr", "1"], tmp_path)
    assert (plain.launcher, plain.script, plain.argv[0]) == ("python", str(tmp_path / "train.py"), sys.executable)
    assert plain.argv[1:] == ("train.py", "--lr", "1")
    module = parse_command(["python", "-m", "pkg.train", "--x"], tmp_path)
    assert (module.launcher, module.module, module.script) == ("python", "pkg.train", None)
    torchrun = parse_command(["torchrun", "--nproc-per-node", "2", "train.py"], tmp_path)
    assert (torchrun.launcher, torchrun.nproc, torchrun.script) == ("torchrun", 2, str(tmp_path / "train.py"))
    with pytest.raises(UsageError, match="does not exist"):
        parse_command(["torchrun", "--nproc-per-node=2", "missing.py"], tmp_path)


def test_child_environments_make_the_usual_detection_find_each_device():
    base = {"CUDA_VISIBLE_DEVICES": "0", "TORCHFERRY_DEVICE": "neuron", "PATH": "/bin"}
    cpu = script_environment("cpu", base, builtin=False)
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and "TORCHFERRY_DEVICE" not in cpu and cpu["ACCELERATE_USE_CPU"] == "true"
    builtin = script_environment("neuron", base, builtin=True)
    assert builtin["TORCHFERRY_DEVICE"] == "neuron" and builtin["CUDA_VISIBLE_DEVICES"] == ""
    real = script_environment("cuda", base, builtin=False)
    assert real["CUDA_VISIBLE_DEVICES"] == "0" and "TORCHFERRY_DEVICE" not in real and real["PATH"] == "/bin"


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # one run of the script
def test_hard_coded_cuda_is_a_portability_failure_named_by_the_scan(tmp_path, monkeypatch):
    """The script runs (a CUDA-only branch would run unchanged); it fails on the reference at the very line `ferry
    scan` names, so the finding is that line, with the scan's fix, not the script's own error."""
    monkeypatch.chdir(tmp_path)
    code, out, err = ferry("check", "--target", "neuron", "-o", "rep", "--", "python", str(PLANTED / "cuda_call.py"))
    assert code == 3, err
    assert "cuda_call.py:5: TF001" in out and "ferry scan --fix" in out
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["verdict"] == "no-go" and report["failure"]["kind"] == "workload" and report["failure"]["finding"]
    assert report["failure"]["message"].startswith("portability failure: the script names CUDA")
    assert report["config"]["source"]["kind"] == "script"
    assert [f["rule_id"] for f in report["script"]["scan_findings"]] == ["TF001"]
    assert not (tmp_path / "rep" / "work" / "target.log").exists()  # the reference failed: the target never ran


def test_curve_rules_exact_noise_and_non_finite():
    exact = curve("loss", [1.0, 0.9], [1.0, 0.9], None, exact=True, floor=Floor())
    assert exact["comparison"].passed and exact["rule"] == "exact"
    off = curve("loss", [1.0, 0.9], [1.0, 0.9000001], None, exact=True, floor=Floor())
    assert not off["comparison"].passed and off["first_difference"] == 1
    # noise: 10 x the running maximum of the noise run's distance (1e-4 at step 0) allows 1e-3 at step 1 too,
    # where the noise run crossed the reference
    noise = curve("loss", [2.0, 1.5], [2.0005, 1.5009], [2.0001, 1.5], exact=False, floor=Floor())
    assert noise["comparison"].passed and noise["rule"] == "noise"
    outside = curve("loss", [2.0, 1.5], [2.0005, 1.5011], [2.0001, 1.5], exact=False, floor=Floor())
    assert not outside["comparison"].passed and outside["first_difference"] == 1
    assert outside["comparison"].allowed == pytest.approx(1e-3)
    # never less than PyTorch's float32 tolerance, or --tol
    assert curve("loss", [2.0], [2.00001], [2.0], exact=False, floor=Floor())["comparison"].passed
    assert curve("loss", [2.0], [2.01], [2.0], exact=False, floor=Floor(tol=1e-2))["comparison"].passed
    nan = curve("loss", [2.0, 1.5], [2.0, float("nan")], None, exact=True, floor=Floor())
    assert nan["comparison"].status == "non_finite"
    short = curve("loss", [2.0, 1.5], [2.0], None, exact=True, floor=Floor())
    assert not short["comparison"].passed


def _trace(*dtypes: str) -> ModuleTrace:
    return ModuleTrace(forward=[Summary(name=str(i), digest="", numel=1, values=[1.0], module_class="M", dtype=d)
                                for i, d in enumerate(dtypes)])


def _ref(*dtypes: str, saved: list[str] | None = None) -> Curves:
    """A reference run whose first forward's modules output ``dtypes`` and whose first backward saved ``saved``."""
    return Curves(losses=[2.0], grad_norms=[], steps=0, parameters=[], modules=_trace(*dtypes) if dtypes else None,
                  dtypes=saved)


def test_a_reference_that_computed_in_bfloat16_is_judged_within_bfloat16s_rounding():
    """Under bfloat16 autocast the noise run (float32 parameters moved by one ulp) barely moves the figures: the floor
    is then assert_close's bfloat16 tolerance, so one bfloat16 rounding of difference passes; in float32 it fails."""
    floor = Floor.of(_ref("bfloat16", "float32"), None)
    assert (floor.precision, floor.rtol) == ("bfloat16", 1.6e-2) and "bfloat16 tolerance" in floor.described()
    assert curve("loss", [2.0], [2.004], [2.0], exact=False, floor=floor)["comparison"].passed
    assert not curve("loss", [2.0], [2.004], [2.0], exact=False, floor=Floor.of(_ref("float32"), None))[
        "comparison"].passed
    assert curve("loss", [2.0], [2.04], [2.0], exact=False, floor=floor)["comparison"].passed is False  # 2%: outside
    assert Floor.of(_ref("float16"), None).rtol == 1e-3 and Floor.of(_ref(), 0.1).tol == 0.1


def test_a_compiled_model_under_bfloat16_autocast_is_judged_within_bfloat16s_rounding():
    """Once a script compiles its model the module trace stands aside (no module outputs), but the compiled graph's
    backward node saved its activations: bfloat16 under bfloat16 autocast, so the floor is bfloat16's. A compiled
    float32 model saves float32 and keeps float32's floor. Without reading the compiled node's saved tensors the
    first reference would keep float32's floor (a false no-go: a compiled AMP script, 0.0037 of loss apart)."""
    import torch

    def saved_dtypes(autocast: bool) -> list[str]:
        torch.manual_seed(0)
        model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                                  torch.nn.Linear(16, 2)), backend="aot_eager")
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 0, 1]))
        shapes, dtypes = graph_metadata(loss)
        loss.backward()  # the saved tensors were only read: the backward still runs
        return dtypes

    amp, plain = saved_dtypes(True), saved_dtypes(False)
    assert "bfloat16" in amp and "bfloat16" not in plain, (amp, plain)
    assert Floor.of(_ref(saved=amp), None).precision == "bfloat16"
    assert Floor.of(_ref(saved=plain), None).precision == "float32"


def _outputs(*values: float, names: tuple[str, ...] = ("embed", "blocks.0.attn.out", "blocks.0.attn", "<model>"),
             where: tuple[str | None, ...] = ()) -> ModuleTrace:
    """A first call's module outputs: one summary per name, its values ``values`` (mean |x| first)."""
    return ModuleTrace(forward=[
        Summary(name=n, digest=f"{v!r}", numel=4, values=[v, v], module_class="M", dtype="float32",
                where=where[i] if i < len(where) else None) for i, (n, v) in enumerate(zip(names, values))])


def _inference(trace: ModuleTrace, calls: int = 6) -> Curves:
    return Curves(losses=[], grad_norms=[], steps=0, parameters=[], modules=trace, forwards=calls)


def test_an_inference_script_is_judged_on_each_module_output_at_the_models_first_call():
    """No loss, no optimizer: every module's output at the model's first call decides, exactly where the kernels are
    the same; under the noise rule within 10 x each module's own noise; a different number of calls fails."""
    from torchferry.harness.parity import Tolerance

    tolerance = Tolerance(tol=0.01, source="default", dtype="float32")
    same = judge(_inference(_outputs(1.0, 2.0, 2.0, 3.0)), None, _inference(_outputs(1.0, 2.0, 2.0, 3.0)), True,
                 tolerance, None)
    assert same.status == "pass" and same.outputs[0].note == "4 of 4 modules equal" and not same.loss_curve
    ref, noise = _inference(_outputs(1.0, 2.0, 2.0, 3.0)), _inference(_outputs(1.0, 2.00001, 2.00001, 3.00001))
    close = judge(ref, noise, _inference(_outputs(1.0, 2.00005, 2.00005, 3.00004)), False, tolerance, None)
    assert close.status == "pass" and close.outputs[0].note.startswith("4 of 4 modules within the rule")
    off = judge(ref, noise, _inference(_outputs(1.0, 2.2, 2.2, 3.3)), False, tolerance, None)
    assert off.status == "fail_accuracy" and off.outputs[0].note.startswith("1 of 4 modules within the rule")
    assert off.first_divergent_module.name == "blocks.0.attn.out"
    fewer = judge(ref, None, _inference(_outputs(1.0, 2.0, 2.0, 3.0), calls=4), True, tolerance, None)
    assert fewer.status == "fail_accuracy" and "6 on the reference, 4 on the target" in fewer.notes[0]


def test_a_divergence_at_pytorchs_own_module_names_the_users_module_that_called_it():
    """blocks.0.attn.out is an nn.Linear: its class's line in torch/nn says nothing of the bug, which is in the
    Attention code that fed it; the user's module around it is named."""
    import os

    import torch

    linear = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "linear.py") + ":53"
    where = (linear, linear, "/home/me/model.py:21", "/home/me/model.py:40")
    ref = _outputs(1.0, 2.0, 2.0, 3.0, where=where)
    divergence = first_divergent(ref, _outputs(1.0, 2.5, 2.5, 3.5, where=where), None, True, Floor())
    assert divergence.summary.name == "blocks.0.attn.out"
    assert divergence.comparison().at.endswith("called by blocks.0.attn (M at /home/me/model.py:21)")
    own = first_divergent(ref, _outputs(1.0, 2.0, 2.5, 3.5, where=where), None, True, Floor())
    assert own.summary.name == "blocks.0.attn" and "called by" not in own.comparison().at


def test_root_modules_of_one_class_get_names_of_their_own():
    """Hugging Face's hub kernels wrap functions as modules, each a root called ``Func``: under one name, each was
    compared with another's output (a 0.96 'difference' the noise run happened to cover)."""
    import contextlib

    import torch

    from torchferry.check.convergence import ModuleTracer

    model, first, second = torch.nn.Linear(2, 2), torch.nn.Tanh(), torch.nn.Tanh()
    tracer = ModuleTracer(contextlib.nullcontext)
    try:
        second(first(model(torch.ones(1, 2))) * 3)
    finally:
        trace = tracer.finish()
    assert [s.name for s in trace.forward] == ["Linear", "Tanh#1", "Tanh#2"]


def test_a_module_computed_in_another_precision_on_the_target_is_named():
    assert precision_difference(_trace("bfloat16", "bfloat16"), _trace("bfloat16", "float32")) == \
        "1 (M): bfloat16 on the reference, float32 on the target"
    assert precision_difference(_trace("bfloat16"), _trace("bfloat16")) is None


def test_other_shapes_on_the_target_are_named_and_equal_shapes_are_not():
    """The exact rule needs the same kernels on the same shapes: a batch padded for the target is named."""
    import torch

    emb, lin = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2)

    def record(length: int) -> list:
        return graph_metadata(lin(emb(torch.zeros(2, length, dtype=torch.long))).sum())[0]

    assert shape_difference(record(5), record(5)) is None
    assert shape_difference(record(5), None) is None  # a run that recorded nothing is not judged
    said = shape_difference(record(5), record(8))
    assert "EmbeddingBackward0.indices [2, 5] on the reference, [2, 8] on the target" in said, said
    # another computation (other autograd nodes) is not "other shapes": parity judges it exactly
    other = graph_metadata((lin(emb(torch.zeros(2, 5, dtype=torch.long))) * 2).sum())[0]
    assert shape_difference(record(5), other) is None


def test_checkpoints_group_a_hugging_face_folder_and_keep_the_last_write(tmp_path):
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "optimizer.pt"):
        (folder / name).write_text("x")
    (tmp_path / "model.pt").write_text("x")
    writes = [CheckpointWrite(path=str(path), how=how, step=step, at_s=0.0) for path, how, step in (
        (tmp_path / "model.pt", "torch.save", 2), (folder / "model.safetensors", "safetensors", 4),
        (folder / "optimizer.pt", "torch.save", 4), (tmp_path / "model.pt", "torch.save", 4),
        (tmp_path / "gone.pt", "torch.save", 4))]
    found = {Path(c["path"]).name: (c["kind"], c["how"], c["step"]) for c in checkpoints(writes)}
    assert found == {"checkpoint-4": ("folder", "save_pretrained", 4), "model.pt": ("file", "torch.save", 4)}


# -- end to end ----------------------------------------------------------------------------------
def check(tmp_path: Path, *command: str, options: tuple[str, ...] = ()) -> tuple[int, str, str, dict]:
    code, out, err = ferry("check", "--target", "neuron", "-o", str(tmp_path / "rep"), *options, "--", *command)
    report_path = tmp_path / "rep" / "report.json"
    return code, out, err, json.loads(report_path.read_text()) if report_path.is_file() else {}


@pytest.fixture(scope="module")
def plain_loop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    return tmp, *check(tmp, "python", str(EXAMPLES / "train_loop.py"), "--steps", "6", "--save-every", "3",
                       "--seq-len", "16", "--out", str(tmp / "out"))


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_plain_loop_with_dropout_on_the_device_is_exact_on_one_random_stream(plain_loop):
    """Dropout draws on the device; with one random stream (the device's default generator is the CPU's, TORCHFERRY_RNG
    =host in the target's processes) the target draws the reference's very numbers: every figure equal."""
    tmp, code, out, err, report = plain_loop
    assert code == 0, out + err
    assert report["config"]["source"]["kind"] == "script"
    assert report["config"]["source"]["command"]["launcher"] == "python"
    assert report["verdict"] in ("go", "go-with-conditions")
    p = report["parity"]
    assert p["status"] == "pass", p["notes"]
    assert p["loss_curve"]["rule"] == "exact" and len(p["loss_curve"]["ref"]) == 6
    assert p["loss_curve"]["ref"] == p["loss_curve"]["target"]
    assert not (tmp / "rep" / "work" / "noise").exists()  # exact: no noise run
    assert p["outputs"][0]["name"] == "final parameters" and p["outputs"][0]["passed"]
    assert (tmp / "rep" / "report.html").is_file()
    assert "unchanged script via python" in out


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_same_kernels_and_no_device_randomness_give_exactly_equal_curves(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "exact.py"))
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and p["loss_curve"]["rule"] == "exact"
    assert p["loss_curve"]["ref"] == p["loss_curve"]["target"] and len(p["loss_curve"]["ref"]) == 4
    assert p["grad_norm_curve"]["ref"] == p["grad_norm_curve"]["target"]
    assert p["outputs"][0]["passed"] and p["outputs"][0]["max_abs_diff"] == 0
    assert not (tmp_path / "rep" / "work" / "noise").exists()  # exact: the reference ran once
    assert "the script does not seed its RNGs" in " ".join(p["notes"])  # exact.py does not seed: torchferry did


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_plain_loop_checkpoints_reload_on_the_cpu(plain_loop):
    tmp, code, out, err, report = plain_loop
    e = report["exit"]
    paths = {Path(f["path"]).name: f for f in e["formats"]}
    assert set(paths) == {"checkpoint.pt", "model.pt"}
    assert e["torchferry_absent"] is True
    # saved on the device as users do: the storages carry the device's tag, so the reference needs map_location
    assert all(f["needs_map_location"] and not f["error"] for f in paths.values())
    assert paths["model.pt"]["parity"]["passed"]  # holds the target's final parameters exactly


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_plain_loop_rehearsal_counts_the_scripts_own_steps(plain_loop):
    tmp, code, out, err, report = plain_loop
    r = report["rehearsal"]
    assert r["status"] != "not-run" and r["emulates"]
    assert r["signatures_step1"] > 0  # the first step compiles every op signature of the script
    assert len(r["new_signatures"]) == 5 and sum(r["new_signatures"]) == 0  # steps 2..6 repeat step 1's shapes
    t = report["timing"]
    assert t["target"]["emulates"] and t["target"]["run_s"] > 0 and len(t["target"]["steps"]) == 5


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_steps_stops_the_script_after_n_optimizer_steps(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(EXAMPLES / "train_loop.py"), "--steps", "50",
                                   "--seq-len", "8", "--out", str(tmp_path / "out"),
                                   options=("--steps", "3", "--ref-instance", "g6e.xlarge"))
    assert code == 0, out + err
    assert report["script"]["stopped"] == "--steps 3" and report["script"]["optimizer_steps"] == 3
    assert len(report["parity"]["loss_curve"]["target"]) == 3
    # the reference counted its second step's FLOPs; that step's time is left out of its step figures only
    t = report["timing"]
    assert t["ref"]["flops_per_step"] > 0 and t["target"]["flops_per_step"] == t["ref"]["flops_per_step"]
    assert len(t["ref"]["steps"]) == 1 and len(t["target"]["steps"]) == 2  # steps 2 and 3; the reference's step 3
    assert any("step 2 ran under the FLOP" in note for note in t["notes"])
    assert "flops " not in (tmp_path / "rep" / "work" / "ferry.log").read_text()  # no run of its own
    # a priced reference: its utilisation and the projection come from those FLOPs
    cost = report["cost"]
    assert cost["projection"]["flops_per_step"] == t["ref"]["flops_per_step"]
    assert [d["utilisation"] > 0 for d in cost["devices"] if d["role"] == "ref"] == [True]
    assert "no checkpoint holds the target's final parameters" in " ".join(report["exit"]["notes"]) or \
        report["exit"]["status"] == "not-run"


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_placement_error_on_the_target_is_a_finding_at_the_users_line(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "placement.py"))
    assert code == 3, out + err
    assert report["verdict"] == "no-go" and report["failure"]["finding"]
    assert "placement.py:12" in report["failure"]["message"]
    assert report["rehearsal"]["placement"]["line"] == 12
    assert report["timing"]["ref"]["time_to_n_s"] is not None  # the reference's figures are kept


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_loss_that_goes_nan_on_the_target_only_is_non_finite(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "nan_on_target.py"))
    assert code == 3, out + err
    assert report["parity"]["status"] == "non_finite"
    assert "backward call 3" in report["parity"]["notes"][0]


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_checkpoint_that_pickles_a_device_object_fails_the_exit(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "device_pickle.py"), str(tmp_path / "ckpt.pt"))
    assert code == 3, out + err
    [fmt] = report["exit"]["formats"]
    assert report["exit"]["status"] == "fail" and fmt["error"] and "device" in fmt["fix"]


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_a_script_that_calls_no_model_and_no_backward_is_a_usage_error(tmp_path):
    """Inference is judged on the model's module outputs: a script with neither a model call nor a backward has nothing
    torchferry can judge, and says what to do instead."""
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "no_model.py"))
    assert code == 2 and "neither trains nor runs a model" in err and "--mode forward" in err


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_no_optimizer_step_judges_the_recorded_losses(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "no_step.py"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and len(report["parity"]["loss_curve"]["target"]) == 3
    assert report["parity"]["loss_curve"]["rule"] == "exact"
    assert any("no optimizer step" in n for n in report["parity"]["notes"])


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_timeout_ends_a_script_that_waits_and_keeps_what_was_recorded(tmp_path):
    # the limit waits out the child's start and its two steps (under 10 s on a 2-core machine at load 4) with room
    # to spare; every second above that is spent waiting for input that never comes
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "reads_stdin.py"), options=("--timeout", "30"))
    assert code == 8, out + err
    assert report["verdict"] == "stopped" and report["failure"]["kind"] == "timeout"
    assert report["timing"]["ref"]["time_to_n_s"] > 0  # two steps recorded (step 2's time is the FLOP counter's too)


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_failing_reference_is_the_users_error_with_their_traceback(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "ref_fails.py"))
    assert code == 4
    assert "the data folder is empty" in err and "ref_fails.py" in err
    assert report["failure"]["kind"] == "workload"


# -- the example scripts, each at a tiny size ----------------------------------------------------
@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_hf_trainer_example(tmp_path):
    """Trainer finds the device itself; Llama has no dropout, so the curves are exactly the CPU's."""
    code, out, err, report = check(tmp_path, "python", str(EXAMPLES / "train_hf_trainer.py"), "--max-steps", "4",
                                   "--save-steps", "4", "--out", str(tmp_path / "out"))
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and p["loss_curve"]["rule"] == "exact"
    assert p["loss_curve"]["ref"] == p["loss_curve"]["target"] and len(p["loss_curve"]["ref"]) == 4
    folders = [f for f in report["exit"]["formats"] if f["name"].endswith("(save_pretrained)")]
    assert {Path(f["path"]).name for f in folders} == {"checkpoint-4", "final"}
    assert all(f["loads_plain"] and f["parity"]["passed"] for f in folders)  # from_pretrained on the CPU, final weights
    # the script's own steps: step 1 compiles most signatures, the Trainer's second step adds a few (2 measured
    # here; which ops is not pinned), and from step 3 on the loop compiles nothing new
    new = report["rehearsal"]["new_signatures"]
    assert report["rehearsal"]["signatures_step1"] > 0 and len(new) == 3 and sum(new[1:]) == 0, new


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_accelerate_example(tmp_path):
    code, out, err, report = check(tmp_path, "python", str(EXAMPLES / "train_accelerate.py"), "--steps", "4",
                                   "--out", str(tmp_path / "out"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass"
    assert len(report["parity"]["grad_norm_curve"]["target"]) == 4  # accumulation: one step per 2 backward calls
    assert len(report["parity"]["loss_curve"]["target"]) == 8
    assert [Path(f["path"]).name for f in report["exit"]["formats"]] == ["model.pt"]


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_trl_sft_example(tmp_path):
    """TRL 1.16's tiled log-prob writes torch.mm into a narrowed tile of a 32768-wide buffer
    (trl/kernels/chunked_logprob.py); TorchNeuron's mm.out refuses that non-contiguous out=, so the unchanged
    script is no-go on the target, the op and the script's line named, while the reference recorded its steps."""
    code, out, err, _ = check(tmp_path, "python", str(EXAMPLES / "train_trl_sft.py"), "--max-steps", "3",
                                   "--out", str(tmp_path / "out"))
    assert code == 3, out + err
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: NO-GO: parity: fail_to_run"), verdict
    assert "aten::mm.out" in verdict and "Cannot process non-contiguous tensors" in verdict
    assert "train_trl_sft.py:" in verdict and "SFTTrainer(" in verdict  # the script's own line
    assert "recorded on the reference: 3 optimizer steps" in out


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
@pytest.mark.multiproc
def test_torchrun_fsdp2_example(tmp_path):
    code, out, err, report = check(tmp_path, "torchrun", "--nproc-per-node", "2", str(EXAMPLES / "train_fsdp2.py"),
                                   "--steps", "3", "--out", str(tmp_path / "out"))
    assert code == 0, out + err
    command = report["config"]["source"]["command"]
    assert command["launcher"] == "torchrun" and command["nproc"] == 2
    assert report["parity"]["status"] == "pass" and len(report["parity"]["loss_curve"]["target"]) == 3
    ranks = sorted(json.loads(p.read_text())["rank"] for p in (tmp_path / "rep" / "work" / "target").glob("record-*.json"))
    assert ranks == [0, 1]  # both ranks recorded
    assert [Path(f["path"]).name for f in report["exit"]["formats"]] == ["model.pt"]


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to three runs of the script and a reload, on a loaded 2-core machine
def test_ctrl_c_stops_the_children_and_writes_the_report(tmp_path):
    """SIGINT to ferry (a terminal's Ctrl-C): the running child is stopped (SIGTERM: its recorders write what they
    have) and the report is written with it."""
    import signal

    code, out, err = signal_ferry_when(["check", "--target", "neuron", "-o", str(tmp_path / "rep"), "--", "python",
                                        str(PLANTED / "reads_stdin.py")], tmp_path,
                                       tmp_path / "rep" / "work" / "ref.log", "waiting for input", signal.SIGINT)
    assert code == 130, out + err
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["verdict"] == "stopped" and report["failure"]["kind"] == "interrupted"
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "rep" / "work" / "ref").glob("record-*.json")]
    assert record["stopped"] == "terminated" and record["steps"] == 2
    assert report["timing"]["ref"]["time_to_n_s"] > 0  # what the reference measured is in the report


@needs_recorder
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_stall_on_the_target_only_is_named_with_where_it_waits(tmp_path, monkeypatch):
    """The reference runs to its end; the target stops making steps: stopped long before --timeout, as a stall, with
    the user's line it waits at (what the recorders saw when ferry asked for their record) and its steps kept."""
    from torchferry.check.script import runner

    monkeypatch.setattr(runner, "STALL_MIN_S", 10.0)
    code, out, err, report = check(tmp_path, "python", str(PLANTED / "stalls_on_target.py"))
    assert code == 8, out + err
    message = report["failure"]["message"]
    assert report["failure"]["kind"] == "timeout" and "stalled: no new step" in message and "after step 2" in message
    assert "stalls_on_target.py:15 (`time.sleep(0.1)" in message
    assert report["timing"]["ref"]["time_to_n_s"] is not None  # the reference's figures are kept
