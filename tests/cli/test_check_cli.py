"""`ferry check` end to end, in-process through `torchferry.cli.main`: results, exit codes, partial reports."""

from __future__ import annotations

import pytest
from checkrun import FAST, FIXTURES, MLP_FORWARD_WITH_PROGRESS, run_check

from torchferry.report.check import FORMAT_VERSION
from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # whole ferry check runs: worker processes each import torch and build the workload


@pytest.mark.slow  # ~25 s on 2 cores: four processes with transformers
def test_cpu_to_cpu_training_run_writes_a_go_report_with_every_result(check):
    result = check("--target", "cpu", *FAST)
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    report = result.report
    assert report["meta"]["format_version"] == FORMAT_VERSION
    assert {"python", "torch", "transformers", "torchferry", "devices", "seeds"} <= set(report["environment"])
    assert report["parity"]["status"] == "pass" and report["parity"]["deterministic"] is True
    assert len(report["parity"]["loss_curve"]["target"]) == 2
    assert report["resume"]["status"] == "pass"
    assert report["exit"]["status"] == "pass" and report["exit"]["torchferry_absent"] is True
    assert {f["name"] for f in report["exit"]["formats"]} == {
        "torch.save state dict", "safetensors", "save_pretrained", "optimizer state"}
    target = report["timing"]["target"]
    assert target["time_to_n_s"] >= target["cold_start_s"] > 0 and len(target["steps"]) == 2
    assert target["steady"]["samples"] == 1
    assert report["verdict"] in ("go", "go-with-conditions")
    assert "verdict:" in result.stdout and "time to 2 steps (headline)" in result.stdout


def test_progress_is_shown_on_stderr_unless_quiet(shared_check):
    result = shared_check(*MLP_FORWARD_WITH_PROGRESS)
    assert result.exit_status == ExitStatus.SUCCESS, result.stderr
    assert "ferry check: [ref cpu] first result" in result.stderr
    assert result.report["resume"]["status"] == "not-run"


@pytest.mark.slow  # ~30 s on 2 cores: generation with the fp64 golden run
def test_generation_mode_compares_greedy_tokens_exactly(check):
    result = check("--target", "cpu", "--mode", "generation", "--new-tokens", "4", *FAST)  # the old name is an alias
    assert result.report["config"]["source"]["mode"] == "generate"
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    tokens = result.report["parity"]["tokens"]
    assert tokens["match"] is True and len(tokens["target"][0]) == 32 + 4


def test_a_diverging_layer_fails_parity_and_is_named(check):
    result = check("--target", "cpu", "-w", f"{FIXTURES / 'diverging.py'}:build", *FAST)
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT, result.stdout
    parity = result.report["parity"]
    assert parity["status"] == "fail_accuracy"
    assert parity["first_divergent_module"]["name"] == "skew"
    assert parity["modules"][0]["name"] == "fc1" and parity["modules"][0]["passed"] is True
    assert result.report["verdict"] == "no-go"
    # each thing once: the module and its figures on the verdict line, the failing checks' count there too
    assert result.stdout.count("first divergent module") == 1 and "first divergent module skew (" in result.stdout
    assert result.stdout.count("check(s) outside tolerance") == 1


def test_a_batchnorms_running_statistics_frozen_on_the_target_fail_parity_by_name(check):
    """A -w workload as a script: outputs, gradients and losses equal, the BatchNorm's statistics left at 0 and 1 on
    the target (fallback_unmarked_writes_lost). Only the buffers after training show it."""
    result = check("--target", "neuron", "-w", f"{FIXTURES / 'batchnorm.py'}:build", *FAST)
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT, result.stdout + result.stderr
    parity = result.report["parity"]
    assert parity["status"] == "fail_accuracy" and parity["loss_curve"]["comparison"]["passed"]
    assert all(g["passed"] for g in parity["gradients"])
    failing = {c["name"] for c in parity["outputs"] if not c["passed"]}
    assert failing == {"final buffer 1.running_mean", "final buffer 1.running_var"}, failing


@pytest.mark.parametrize(
    ("build", "status", "failure_kind"),
    [
        ("raises", ExitStatus.WORKLOAD_ERROR, "workload"),
        ("nan", ExitStatus.WORKLOAD_ERROR, "non-finite"),
        ("oom", ExitStatus.OUT_OF_MEMORY, "out-of-memory"),
        ("missing_dependency", ExitStatus.USAGE, "missing-dependency"),
        ("build_raises", ExitStatus.WORKLOAD_ERROR, "workload"),
    ],
)
def test_bad_workloads_give_their_exit_code_and_a_partial_report(shared_check, build, status, failure_kind):
    result = shared_check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:{build}", *FAST)
    assert result.exit_status == status, result.stderr
    assert result.report["failure"]["kind"] == failure_kind and result.report["failure"]["phase"] == "reference"
    assert result.report["verdict"] == "stopped"  # an error stopped the run: not a no-go
    assert result.stdout.startswith("ferry check:") and f"stopped: {failure_kind}" in result.stdout
    assert "NO-GO" not in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("ferry check: on the reference device 'cpu'")


def test_user_traceback_is_shown_apart_from_the_message(shared_check):
    result = shared_check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:raises", *FAST)  # the run above
    assert "ValueError: the user's forward is broken" in result.stderr


def test_the_users_traceback_has_none_of_torchferrys_frames(shared_check):
    result = shared_check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:raises", *FAST)  # the run above
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith('File "')]
    assert any("failing.py" in f for f in frames), result.stderr  # the user's forward is shown
    assert not [f for f in frames if "/torchferry/" in f], frames  # torchferry's own frames are not


def test_nan_on_the_reference_shows_no_traceback_as_if_it_were_the_users(shared_check):
    result = shared_check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:nan", *FAST)  # the run above
    assert "Traceback" not in result.stderr and not result.report["failure"]["traceback"]
    assert result.report["failure"]["kind"] == "non-finite"


def test_nan_names_the_first_module_with_a_non_finite_output(shared_check):
    result = shared_check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:nan", *FAST)  # the run above
    assert "first module with a non-finite output" in result.report["failure"]["message"]


def test_a_target_crash_is_reported_as_no_go_not_fatal(check):
    result = check("--target", "cpu", "-w", f"{FIXTURES / 'failing.py'}:crash_target", *FAST)
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT, result.stderr
    report = result.report
    assert report["parity"]["status"] == "fail_to_run"
    assert report["failure"]["kind"] == "workload" and report["failure"]["finding"] is True  # an error slug, always
    assert "died" in report["failure"]["message"] and "signal 6" in report["failure"]["message"]
    assert report["timing"]["ref"]["time_to_n_s"] is not None  # the reference's measurements are kept


def test_unknown_workload_is_a_usage_error_listing_the_built_ins(check):
    result = check("-w", "resnet9000", *FAST)
    assert result.exit_status == ExitStatus.USAGE
    assert "llama, gpt2, bert, mlp" in result.stderr


def test_unknown_device_is_device_unavailable(check):
    result = check("--target", "warpdrive", *FAST)
    assert result.exit_status == ExitStatus.DEVICE_UNAVAILABLE
    assert "unknown device 'warpdrive'" in result.stderr and "cpu" in result.stderr


def test_unwritable_output_is_an_output_error_before_measuring(tmp_path):
    from checkrun import run_check

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_check(["--target", "cpu", *FAST], blocker / "report")
    assert result.exit_status == ExitStatus.OUTPUT_ERROR
    assert "not writable" in result.stderr and "--output" in result.stderr


def test_bert_cannot_generate(check):
    result = check("--target", "cpu", "-w", "bert", "--mode", "generation", *FAST)
    assert result.exit_status == ExitStatus.USAGE
    assert "train, forward" in result.stderr


@pytest.mark.slow  # ~40 s: a full cpu -> cpu check
def test_extra_state_holding_a_device_is_named_with_a_fix_that_works(tmp_path):
    result = run_check(["--target", "cpu", "-w", f"{FIXTURES / 'extra_state.py'}:build", *FAST], tmp_path / "r")
    formats = {f["name"]: f for f in result.report["exit"]["formats"]}
    safetensors = formats["safetensors"]
    assert not safetensors["saved"] and "_extra_state" in safetensors["fix"] and "get_extra_state" in safetensors["fix"]
    assert "cpu()" not in safetensors["fix"]  # a .cpu() copy would fail the same way: not offered
    assert formats["torch.save state dict"]["loads_plain"] and formats["torch.save state dict"]["parity"]["passed"]


@pytest.mark.slow  # ~45 s: a full cpu -> cpu check with torch.compile on the target
def test_a_compiled_target_resumes_from_a_checkpoint_without_orig_mod_keys(check):
    result = check("--target", "cpu", "-w", "mlp", "--compile", "eager", *FAST)
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    assert result.report["resume"]["status"] == "pass", result.report["resume"]["notes"]
    import torch

    saved = torch.load(result.report_dir / "work" / "resume" / "checkpoint.pt", weights_only=True)
    assert not any(k.startswith("_orig_mod.") for k in saved["model"])


@pytest.mark.slow  # ~50 s: a full cpu -> cpu check of a LoRA model
def test_a_peft_model_is_not_treated_as_transformers_by_the_exit_check(check):
    pytest.importorskip("peft", reason="peft is not installed (pip install -e '.[test]' installs it)")
    result = check("--target", "cpu", "-w", f"{FIXTURES / 'lora.py'}:build", *FAST)
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout + result.stderr
    formats = {f["name"]: f for f in result.report["exit"]["formats"]}
    assert "PeftModel.from_pretrained needs model, model_id" in formats["save_pretrained"]["skipped"]
    assert formats["torch.save state dict"]["parity"]["passed"] and result.report["exit"]["status"] == "pass"
    zero = [g for g in result.report["parity"]["gradients"] if g["zero"]]  # LoRA's A matrices start with zero gradients
    assert zero and all(g["passed"] and g["cosine"] is None for g in zero)
    assert "not reloaded" in result.stdout and "exactly zero on both sides" in result.stdout
