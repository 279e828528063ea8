"""Right verdicts on models as users write them (issue 26): dropout on, inference in eval mode, one step,
an adapter that imports the module beside it. In-process `ferry check` runs onto the built-in device with
the smallest repetitions; the runs that several tests judge are shared (module-scoped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ferryrun import ferry
from torchferry.status import ExitStatus

pytestmark = pytest.mark.slow  # whole ferry check runs on real models (dropout Transformer, adapters): worker processes

FIXTURES = Path(__file__).with_name("fixtures")
FAST = ["--rounds", "1", "--reps", "1", "-q", "--target", "neuron"]
TRANSFORMER = f"{FIXTURES / 'dropout_transformer.py'}:build"


def check(out: Path, workload: str, *args: str) -> tuple[int, str, dict]:
    code, stdout, stderr = ferry("check", "-w", workload, *FAST, *args, "-o", str(out))
    return code, stdout + stderr, json.loads((out / "report.json").read_text())


def verdict_of(report: dict, result: str) -> str:
    return {v["result"]: v for v in report["verdicts"]}[result]["verdict"]


@pytest.fixture(scope="module")
def clean_dropout_run(tmp_path_factory):
    """The Transformer encoder with its default dropout 0.1, trained 4 steps (resume from step 2)."""
    os.environ["TORCHFERRY_CHECK_WARMUP"] = "0"  # the module scope outlives the autouse monkeypatch
    return check(tmp_path_factory.mktemp("dropout") / "r", TRANSFORMER, "--steps", "4")


@pytest.mark.timeout(400)
def test_dropout_transformer_gets_bit_equal_draws_and_passes_parity_resume_and_exit(clean_dropout_run):
    code, out, report = clean_dropout_run
    parity = report["parity"]
    assert parity["status"] == "pass" and parity["deterministic"] is True, out
    # the same seed per step on both devices, so the same dropout masks: the built-in device's kernels are
    # the CPU's, so outputs and losses are equal bit for bit (another mask would move them by ~0.1)
    assert all(c["max_abs_diff"] == 0 for c in parity["outputs"]), parity["outputs"]
    assert parity["loss_curve"]["comparison"]["max_abs_diff"] == 0
    # the gradients only to rounding: the trn2 profile's compiled_results_row_major rule gives some backward
    # results of transposed inputs TorchNeuron's row-major layout, and the matmuls after them round otherwise
    assert all(c["max_abs_diff"] <= 1e-6 for c in parity["gradients"]), parity["gradients"]
    # the runner compared both devices' draws after seeding: equal, so no note that the generators differ
    assert not any("generator draws other numbers" in note for note in parity["notes"]), parity["notes"]
    assert verdict_of(report, "parity") == "go" and verdict_of(report, "resume") == "go"
    assert report["resume"]["exact"] is True
    # the exit reload runs in eval mode, and so does the target's own eval output: no dropout in either
    assert verdict_of(report, "exit") == "go-with-conditions", report["exit"]
    assert all(f["parity"] is None or f["parity"]["passed"] for f in report["exit"]["formats"])
    assert report["verdict"] == "go-with-conditions" and code == ExitStatus.SUCCESS, out
    assert "every step reseeded from --seed" in out


@pytest.mark.timeout(400)
def test_dropout_that_misbehaves_only_on_the_target_is_no_go(tmp_path, monkeypatch):
    monkeypatch.setenv("DROPOUT_BUG", "1")  # the fixture's dropout keeps p=0.5 off the CPU
    code, out, report = check(tmp_path / "r", TRANSFORMER, "--steps", "2")
    assert report["parity"]["deterministic"] is True, out  # the reference is still deterministic
    assert report["parity"]["status"] == "fail_accuracy", report["parity"]
    assert verdict_of(report, "parity") == "no-go" and report["verdict"] == "no-go"
    assert code == ExitStatus.NEGATIVE_RESULT


@pytest.mark.timeout(300)
def test_forward_mode_runs_eval_mode_under_inference_mode_and_reaches_the_eval_fast_path(tmp_path):
    code, out, report = check(tmp_path / "r", TRANSFORMER, "--mode", "forward", "--steps", "2")
    assert report["config"]["source"]["execution"] == "model.eval() under torch.inference_mode()"
    assert "runs: model.eval() under torch.inference_mode()" in out
    assert report["parity"]["status"] == "pass" and verdict_of(report, "parity") == "go", out
    # nn.TransformerEncoderLayer's fused path runs only in eval mode without autograd: the target ran it
    ops = {f["op"]: f["calls"] for f in report["rehearsal"]["fallbacks"]}
    assert ops.get("aten::_transformer_encoder_layer_fwd") == 4, ops  # 2 layers x 2 steps
    assert report["verdict"] != "no-go"


@pytest.mark.timeout(300)
def test_one_step_with_an_adapter_that_imports_its_neighbour_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # neither the adapter's folder nor the repository
    code, out, report = check(tmp_path / "r", f"{FIXTURES / 'neighbour' / 'adapter.py'}:build", "--steps", "1")
    assert report["failure"] is None, out  # `from net import Net` resolved in every worker and in the exit loader
    assert report["parity"]["status"] == "pass" and report["parity"]["loss_curve"]["comparison"]["max_abs_diff"] == 0
    assert verdict_of(report, "resume") == "not-run"
    assert "resume needs --steps 2 or more" in report["resume"]["notes"][0]
    assert all(f["error"] is None or f["needs_map_location"] for f in report["exit"]["formats"]), report["exit"]
    assert report["verdict"] == "go-with-conditions" and code == ExitStatus.SUCCESS, out
