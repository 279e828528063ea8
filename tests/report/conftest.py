"""A small but complete result model, built without running anything, for the renderer tests."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from torchferry.check import cost, rehearsal, timing, verdict
from checkcfg import make_config

from torchferry.check.config import CostInputs
from torchferry.harness import parity
from torchferry.harness.prices import load_prices
from torchferry.report.check import FORMAT, FORMAT_VERSION, CheckReport, ExitFormat, ExitResult, ResumeResult
from torchferry.report.meta import Meta


@pytest.fixture
def report(tmp_path, monkeypatch) -> CheckReport:
    torch.manual_seed(0)
    golden = {n: torch.randn(2000, dtype=torch.float64) for n in ("embed", "block", "head")}
    ref = {n: g.float() for n, g in golden.items()}
    target = {"embed": ref["embed"], "block": ref["block"] + 0.5, "head": ref["head"] + 0.5}
    # the config the command itself builds (its parser and validation), with the output folder made machine-independent
    monkeypatch.delenv("TORCHFERRY_CHECK_WARMUP", raising=False)  # the default, whatever the caller's shell says
    built = make_config(tmp_path, "-w", "llama", "--mode", "train", "--steps", "3", "--target", "neuron",
                        "--ref-instance", "g6e.xlarge")
    cfg = dataclasses.replace(built, output="/ferry-report").to_dict()
    r = CheckReport(meta=Meta(format=FORMAT, format_version=FORMAT_VERSION, created="2026-01-01T00:00:00+00:00",
                              command="ferry check", wall_s=12.5), environment={"torch": "x"}, config=cfg,
                    subject=built.subject())
    r.parity.status = "fail_accuracy"
    r.parity.outputs = [parity.compare("logits", ref["head"], target["head"], golden["head"], 1e-2)]
    r.parity.modules, r.parity.first_divergent_module = parity.localise(ref, target, golden, 1e-2, False)
    r.parity.loss_curve = {"ref": [2.0, 1.5, 1.2], "target": [2.0, 1.6, 1.3], "fp64": [2.0, 1.5, 1.2],
                           "comparison": parity.compare("loss curve", torch.tensor([2.0, 1.5]), torch.tensor([2.0, 1.6]), None, 1e-2)}
    steps = timing.StepFigures(units_per_step=64, unit="tokens", steps=[0.9, 0.2, 0.1], time_to_n_s=4.0, cold_start_s=3.0,
                               flops_per_step=1e9)
    r.timing = timing.summarise(timing.device_timing("cpu", steps, [[0.1, 0.11]]),
                                timing.device_timing("neuron", dataclasses.replace(steps, time_to_n_s=3.0), [[0.05]]),
                                steps=3)
    r.cost = cost.estimate(r.timing, CostInputs(prices=None, dtype="float32", eng_hours=40, eng_rate=150, volume=1e9,
                                                ref_instance="g6e.xlarge", target_instance="trn2.48xlarge"), load_prices())
    r.resume = ResumeResult(status="pass", saved_at_step=1, uninterrupted=[1.5, 1.2], resumed=[1.5, 1.2], max_abs_diff=0.0, exact=True)
    r.exit = ExitResult(status="conditions", torchferry_absent=True, loader_device="cpu", formats=[
        ExitFormat("torch.save state dict", saved=True, location_tags=["neuron:0"], needs_map_location=True, fix="save .cpu()")])
    r.rehearsal = rehearsal.judge(rehearsal.RehearsalRecord.from_dict({
        "emulates": "trn2", "capacity_bytes": 2**30, "numerics": "target", "read": True, "executed_calls": 990,
        "peak_bytes": 2**29,
        "fallback_ops": {"aten::linalg_qr": 3}, "fallback_reasons": {"aten::linalg_qr": "explicit CPU fallback (cpu_fallback.py)"},
        "device_time_us": {"aten::mm": 300.0, "aten::linalg_qr [host fallback]": 100.0},
        "steps": [{"signatures": 40, "compilations": 40, "cache_hits": 0, "host_syncs": {"aten::_local_scalar_dense": 1},
                   "inputs": {"input_ids": [2, 8]}},
                  {"signatures": 6, "compilations": 6, "cache_hits": 0, "host_syncs": {"aten::_local_scalar_dense": 1},
                   "inputs": {"input_ids": [2, 12]}},
                  {"signatures": 6, "compilations": 6, "cache_hits": 0, "host_syncs": {"aten::_local_scalar_dense": 1},
                   "inputs": {"input_ids": [2, 16]}}]}))
    verdict.decide(r)
    return r
