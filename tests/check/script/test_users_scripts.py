"""`ferry check -- COMMAND` on scripts as users write them (tests/check/script/users/), end to end, cpu -> the built-in
neuron: the verdict a person would give, and the figures that decide it.

Each script is tiny and written the way the PyTorch examples and user code are written, not to fit the tool: a GAN
(two optimizers, noise drawn on the device, a BatchNorm), a CNN with BatchNorm (evaluated, saved through a file) and
its GroupNorm twin, bfloat16 autocast, torch.compile(model), LoRA through Accelerate and PEFT, a diffusers UNet, a
best-model checkpoint, a VAE (sampling in forward), a word-level Transformer language model (the model saved whole
through an open file, its device taken as a flag), a script whose CUDA mentions are guarded, a DataLoader with a short
last batch, a planted accelerator-only bug with its clean twin, a script that resumes from its own checkpoint, a
generation loop (inference) with a planted bug of its own, and torchvision's --channels-last flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ferryrun import ferry

USERS = Path(__file__).with_name("users")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a few runs of a script each, on a loaded 2-core machine


def check(tmp: Path, *command: str) -> tuple[int, str, str, dict]:
    code, out, err = ferry("check", "--target", "neuron", "-o", str(tmp / "rep"), "--", "python", *command)
    path = tmp / "rep" / "report.json"
    return code, out, err, json.loads(path.read_text()) if path.is_file() else {}


def test_a_planted_accelerator_only_bug_is_no_go_naming_its_module(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "rmsnorm_branch.py"))
    assert code == 3, out + err
    module = report["parity"]["first_divergent_module"]
    assert module["name"].startswith("blocks.") and ".norm" in module["name"], module
    assert f"RMSNorm at {USERS / 'rmsnorm_branch.py'}:" in module["at"]
    verdict_line = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict_line.startswith("verdict: NO-GO: parity: first divergent module blocks.")  # the deciding figure


def test_its_clean_twin_is_exact(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "rmsnorm_branch.py"), "--no-plant")
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and p["loss_curve"]["rule"] == "exact"
    assert p["loss_curve"]["ref"] == p["loss_curve"]["target"]


def test_a_gan_draws_the_references_noise_and_both_checkpoints_hold_their_model(tmp_path):
    (tmp_path / "out").mkdir()
    code, out, err, report = check(tmp_path, str(USERS / "gan.py"), "--out", str(tmp_path / "out"))
    p = report["parity"]
    assert p["loss_curve"]["comparison"]["passed"], out + err  # one random stream: the same noise
    assert p["loss_curve"]["ref"] == p["loss_curve"]["target"]
    assert p["outputs"][0]["name"] == "final parameters" and p["outputs"][0]["passed"]
    # the generator's BatchNorm1d statistics stay where they started on Trainium (native_batch_norm runs on the host
    # there and its fallback copies back only the outputs the schema marks): netG.pth holds them, so it is no-go
    assert code == 3 and p["status"] == "fail_accuracy", out + err
    assert {c["name"] for c in p["outputs"] if not c["passed"]} >= {
        "final buffers", "final buffer Generator.main.1.running_mean (BatchNorm1d)"}
    assert report["script"]["optimizer_steps"] == 6 and report["script"]["backward_calls"] == 9
    formats = {Path(f["path"]).name: f for f in report["exit"]["formats"]}
    assert set(formats) == {"netG.pth", "netD.pth"}
    assert all(f["parity"]["passed"] for f in formats.values())  # each holds its own model's final parameters
    assert not any("shape churn" in c for c in report["rehearsal"]["conditions"])  # G and D in turn: one iteration


def test_a_cnn_whose_batchnorm_statistics_stay_frozen_on_trainium_is_no_go_naming_them(tmp_path):
    """Training-mode BatchNorm through TorchNeuron's CPU fallback: every loss, gradient and parameter equal, the running
    statistics (what model.eval() and the saved file use) left at 0 and 1. The verdict says so and names the fix."""
    code, out, err, report = check(tmp_path, str(USERS / "cnn_batchnorm.py"), "--device", "{device}",
                                   "--out", str(tmp_path / "cnn.pt"))
    assert code == 3, out + err
    p = report["parity"]
    assert p["outputs"][0]["name"] == "final parameters" and p["outputs"][0]["passed"]
    failing = [c["name"] for c in p["outputs"] if not c["passed"]]
    assert failing[0] == "final buffers" and set(failing[1:]) == {"final buffer 1.running_mean (BatchNorm2d)",
                                                                  "final buffer 1.running_var (BatchNorm2d)"}
    verdict_line = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict_line.startswith("verdict: NO-GO: parity:") and "running_var (BatchNorm2d)" in verdict_line
    actions = " ".join(a["action"] for a in report["next_actions"] if a["result"] == "parity")
    assert "1.running_mean (BatchNorm2d)" in actions and "in-place update" in actions
    [bn] = [f for f in report["rehearsal"]["fallbacks"] if f["op"] == "aten::native_batch_norm"]
    assert "running_mean and running_var do not move" in bn["reason"] and "swa_utils.update_bn" in bn["reason"]


def test_its_groupnorm_twin_keeps_parity(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "cnn_batchnorm.py"), "--device", "{device}", "--norm",
                                   "group", "--out", str(tmp_path / "cnn.pt"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass"
    assert not any(c["name"].startswith("final buffer") for c in report["parity"]["outputs"])  # GroupNorm keeps none


def test_bfloat16_autocast_is_judged_within_bfloat16s_rounding_and_the_precision_difference_is_named(tmp_path):
    """The target's autocast keeps LayerNorm in float32 (TorchNeuron's policy, CUDA's too) where the CPU's computes it
    in bfloat16: a difference of bfloat16 rounding, no fault. It was NO-GO under float32's floor."""
    code, out, err, report = check(tmp_path, str(USERS / "amp_bf16.py"), "--out", str(tmp_path / "amp.pt"))
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and "bfloat16 tolerance" in p["tolerance"]["rule"]
    assert "2 (LayerNorm): bfloat16 on the reference, float32 on the target" in " ".join(p["notes"])


def test_a_compiled_model_under_bfloat16_autocast_is_judged_within_bfloat16s_rounding(tmp_path):
    """With --compile the module trace stands aside, so the precision comes from what the compiled graph saved for
    backward (bfloat16). It was NO-GO under float32's floor: the loss 0.0037 apart, allowed 1.2e-05."""
    code, out, err, report = check(tmp_path, str(USERS / "amp_bf16.py"), "--compile", "--out", str(tmp_path / "a.pt"))
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and "bfloat16 tolerance" in p["tolerance"]["rule"], p["tolerance"]
    assert report["rehearsal"]["compile"]["graphs"] == 2 and report["exit"]["status"] == "pass"


def test_a_model_compiled_with_torch_compile_rehearses_its_graphs_and_no_recompile_of_torchferrys(tmp_path):
    """`model = torch.compile(model)`: the reference failed inside the recorders' module hook (traced by dynamo), and
    removing that hook after the first backward recompiled the graph (a false 'one graph per input signature'). Now:
    one forward and one backward graph, exact parity, and the rehearsal names the graphs."""
    code, out, err, report = check(tmp_path, str(USERS / "compiled_classifier.py"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and report["parity"]["loss_curve"]["rule"] == "exact"
    compiled = report["rehearsal"]["compile"]
    assert compiled["graphs"] == 2 and [f["recompiles"] for f in compiled["frames"]] == [0], compiled
    assert not any("compiled frame" in c for c in report["rehearsal"]["conditions"])
    assert "global hooks" not in (tmp_path / "rep" / "work" / "target.log").read_text()


def test_a_script_that_resumes_from_its_own_checkpoint_starts_each_run_from_the_user_s_files(tmp_path, monkeypatch):
    """`if os.path.exists("ckpt.pt"): resume`: the target found the reference's checkpoint and ran one step (NO-GO on
    'optimizer steps'). Each run now starts from the folder the user had; the target's checkpoint is left there."""
    folder = tmp_path / "job"
    folder.mkdir()
    monkeypatch.chdir(folder)  # the script writes ckpt.pt where it runs
    code, out, err = ferry("check", "--target", "neuron", "-o", str(tmp_path / "rep"), "--", "python",
                           str(USERS / "resume_if_exists.py"))
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and report["parity"]["loss_curve"]["rule"] == "exact"
    assert report["script"]["optimizer_steps"] == 10 and "resumed" not in (tmp_path / "rep" / "work" / "target.log"
                                                                           ).read_text()
    [ckpt] = report["exit"]["formats"]
    assert ckpt["name"] == "ckpt.pt (torch.save)" and ckpt["saved"] and not ckpt["error"], ckpt
    assert (folder / "ckpt.pt").is_file() and any("are the target's" in f for f in report["script"]["files"])
    assert (tmp_path / "rep" / "work" / "ref-files" / str(folder / "ckpt.pt").lstrip("/")).is_file()


def test_a_generation_loop_is_checked_as_inference_exactly_with_its_growing_length_as_churn(tmp_path):
    """No backward(): each call of the model is a step, parity is every module's output at its first call. It was
    STOPPED ('the script does no training'). Resume and exit do not apply, so they make no condition."""
    code, out, err, report = check(tmp_path, str(USERS / "generate_lm.py"))
    assert code == 0, out + err
    assert report["script"]["forward_calls"] == 6 and report["script"]["backward_calls"] == 0
    p = report["parity"]
    assert p["status"] == "pass" and p["outputs"][0]["note"] == "24 of 24 modules equal", p["outputs"]
    churn = [c for c in report["rehearsal"]["conditions"] if c.startswith("shape churn")]
    assert churn and "TinyLM input 0: [1, 4] -> [1, 5]" in churn[0], report["rehearsal"]["conditions"]
    assert not [a for a in report["next_actions"] if a["result"] in ("exit", "resume")], report["next_actions"]


def test_a_planted_accelerator_only_bug_in_inference_is_no_go_naming_the_users_module(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "generate_lm.py"), "--plant")
    assert code == 3, out + err
    module = report["parity"]["first_divergent_module"]
    assert module["name"] == "blocks.0.attn.out", module
    assert f"called by blocks.0.attn (Attention at {USERS / 'generate_lm.py'}:" in module["at"], module["at"]


def test_a_model_moved_to_channels_last_on_the_device_is_no_go_naming_the_line_and_the_fix(tmp_path):
    """torchvision's classification reference converts the model on the device with --channels-last; TorchNeuron's
    _to_copy refuses the format and its build does not fall back. Without the flag the same script is the clean twin
    (tests/device/test_target_rules.py runs its calls)."""
    code, out, err, report = check(tmp_path, str(USERS / "cnn_channels_last.py"), "--channels-last")
    assert code == 3, out + err
    verdict_line = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict_line.startswith("verdict: NO-GO: parity: fail_to_run: failed (RuntimeError) at ")
    assert "cnn_channels_last.py:16: model = model.to(memory_format=torch.channels_last)" in verdict_line
    assert "x.clone(memory_format=torch.channels_last)" in verdict_line


@pytest.mark.multiproc
def test_a_gloo_group_chosen_where_cuda_is_not_is_no_go_naming_the_line_that_chose_it(tmp_path):
    """The target fails in DDP's constructor ('No backend type associated with device type neuron'), eight lines after
    the cause; the finding names the line that chose "gloo" and the fix (it named only the constructor, and the scan
    result said 'no line names CUDA': the scan had not run)."""
    code, out, err = ferry("check", "--target", "neuron", "-o", str(tmp_path / "rep"), "--", "torchrun",
                           "--nproc-per-node", "2", str(USERS / "ddp_gloo.py"))
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert code == 3, out + err
    [finding] = report["parity"]["notes"]
    assert finding.startswith("portability failure: the script names CUDA") and "ddp_gloo.py:15: TF006" in finding
    assert "get_default_backend_for_device" in finding and "No safe rewrite exists" in finding
    assert any(f["rule_id"] == "TF006" for f in report["script"]["scan_findings"])


@pytest.mark.multiproc
def test_its_fix_runs_ddp_on_the_target_with_exact_parity(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_OUT", str(tmp_path / "ddp.pt"))
    code, out, err = ferry("check", "--target", "neuron", "-o", str(tmp_path / "rep"), "--", "torchrun",
                           "--nproc-per-node", "2", str(USERS / "ddp_gloo.py"), "--portable")
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and report["parity"]["loss_curve"]["rule"] == "exact"


def test_lora_with_accelerate_saves_an_adapter_that_holds_every_trained_parameter(tmp_path):
    """PEFT's save_pretrained writes the LoRA weights only: the frozen base model is not the run's result. The exit
    result was go-with-conditions ('holds 8 of the 25 final parameters') when the frozen ones were counted."""
    code, out, err, report = check(tmp_path, str(USERS / "lora_accelerate.py"), str(tmp_path / "lora"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and report["script"]["optimizer_steps"] == 4
    [adapter] = report["exit"]["formats"]
    assert adapter["name"] == "adapter_model.safetensors (safetensors)" and adapter["parity"]["passed"]
    assert report["exit"]["status"] == "pass", report["exit"]["notes"]


def test_a_diffusers_unet_saved_with_save_pretrained_reloads_with_diffusers(tmp_path):
    """A diffusers folder (config.json with _class_name) was reloaded with transformers' AutoConfig: a false no-go."""
    code, out, err, report = check(tmp_path, str(USERS / "diffusers_unet.py"), str(tmp_path / "unet"))
    assert code == 0, out + err
    [unet] = report["exit"]["formats"]
    assert unet["name"] == "unet (save_pretrained)" and unet["error"] is None and unet["parity"]["passed"]


def test_a_best_model_saved_at_the_end_is_reloaded_not_called_a_parity_loss(tmp_path):
    """Early stopping keeps the best state dict from an earlier step and saves it at the end: it holds none of the
    final parameters, which is no loss of parity ('parity FAIL (missing)' before): it reloads, its values unjudged."""
    code, out, err, report = check(tmp_path, str(USERS / "best_checkpoint.py"), str(tmp_path / "best.pt"))
    assert code == 0, out + err
    [best] = report["exit"]["formats"]
    assert best["loads_plain"] and best["parity"] is None
    assert any("holds none of the final parameters, though written after the last step" in n
               for n in report["exit"]["notes"])
    assert not any(a["result"] == "exit" for a in report["next_actions"])


def test_a_vae_that_samples_in_forward_is_exact(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "vae.py"), "--out", str(tmp_path / "vae.pt"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass" and report["parity"]["loss_curve"]["rule"] == "exact"
    assert [Path(f["path"]).name for f in report["exit"]["formats"]] == ["vae.pt"]


def test_a_language_model_saved_whole_through_a_file_and_a_device_flag(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "word_lm.py"), "--save", str(tmp_path / "lm.pt"),
                                   "--device", "{device}")
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass"
    assert report["timing"]["step_unit"] == "backward calls"  # a plain SGD update: no optimizer steps
    [saved] = report["exit"]["formats"]
    assert Path(saved["path"]).name == "lm.pt" and "weights_only=False" in saved["fix"]  # a pickled model, seen
    assert "--device cpu" in (tmp_path / "rep" / "work" / "ferry.log").read_text()  # each side its own device
    assert "--device neuron" in (tmp_path / "rep" / "work" / "ferry.log").read_text()


def test_a_script_that_never_uses_the_target_says_it_chose_cpu_and_where(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "word_lm.py"), "--save", str(tmp_path / "lm.pt"),
                                   "--device", "cpu")
    assert code == 3, out + err
    assert report["failure"]["message"].startswith("the script chose cpu")
    assert "--device {device}" in report["failure"]["message"]
    assert report["rehearsal"]["status"] == "not-run"


def test_guarded_cuda_branches_run_and_are_reported_not_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the script saves into its working folder
    code, out, err, report = check(tmp_path, str(USERS / "guarded_cuda.py"))
    assert code == 0, out + err
    assert report["parity"]["status"] == "pass"
    findings = {f["line"]: f for f in report["script"]["scan_findings"]}
    assert findings[25]["severity"] == "info" and findings[25]["rule_id"] == "TF001"  # .cuda() in a CUDA-only branch
    assert findings[11]["severity"] == "error" and findings[11]["rule_id"] == "TF006"  # an nccl default: real hazard
    [scan] = [item for item in report["verdicts"] if item["result"] == "scan"]
    assert scan["verdict"] == "go-with-conditions"
    assert any(a["result"] == "scan" and "guarded_cuda.py:11: TF006" in a["action"] for a in report["next_actions"])


def test_a_short_last_batch_is_named_as_such_not_as_churn(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "short_last_batch.py"))
    assert code == 0, out + err
    r = report["rehearsal"]
    assert not any("shape churn" in c for c in r["conditions"])
    assert any(n.startswith("the last batch is smaller") and "drop_last=True" in n for n in r["notes"])


def test_a_script_that_seeds_in_its_loop_reads_its_random_state_and_forks_data_workers(tmp_path):
    code, out, err, report = check(tmp_path, str(USERS / "seeds_in_loop.py"))
    assert code == 0, out + err
    p = report["parity"]
    assert p["status"] == "pass" and p["loss_curve"]["rule"] == "exact"  # one stream: every draw the reference's
    assert report["script"]["seeded"] == "by the script"
