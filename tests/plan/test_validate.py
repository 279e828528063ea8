"""The plan's predicted peak per rank agrees within 10% with the peak measured on the built-in
`neuron` device (torch.neuron.max_memory_allocated, second step), for FSDP2 over 2 and 4 ranks on
a small Llama, without and with activation checkpointing (and selective on 2 ranks): `ferry plan
--validate`, in-process."""

from __future__ import annotations

import pytest

from planrun import run_plan, write_config

from torchferry.status import ExitStatus

CASES = [pytest.param(2, "off", marks=pytest.mark.multiproc),
         pytest.param(2, "on", marks=pytest.mark.multiproc),
         pytest.param(2, "selective", marks=pytest.mark.multiproc),
         pytest.param(4, "off", marks=[pytest.mark.multiproc, pytest.mark.slow]),
         pytest.param(4, "on", marks=[pytest.mark.multiproc, pytest.mark.slow])]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("world, checkpointing", CASES)
def test_predicted_peak_matches_the_measured_peak(tmp_path, world, checkpointing):
    result = run_plan(["--config", str(write_config(tmp_path)), "--world", str(world), "--checkpointing", checkpointing,
                       "--seq-len", "256", "--micro-batch", "2", "--validate"], tmp_path / "out")
    assert result.exit_status == ExitStatus.SUCCESS, result.stderr
    (validation,) = result.report["validations"]
    assert len(validation["measured_bytes"]) == world and validation["device"] == "neuron"
    predicted = result.report["layouts"][0]["peak_bytes"]
    assert validation["predicted_bytes"] == predicted
    for measured in validation["measured_bytes"]:
        assert abs(predicted - measured) / measured <= 0.10, (predicted, validation["measured_bytes"])
    assert abs(validation["error"]) <= 0.10 and validation["passed"] is True
    assert f"validate FSDP {world} x TP 1, AC {checkpointing}" in result.stdout


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_checkpointing_lowers_both_the_prediction_and_the_measurement(tmp_path):
    """The agreement is not a constant: the layout change moves both figures the same way."""
    config = str(write_config(tmp_path, num_hidden_layers=8))
    figures = {}
    for checkpointing in ("off", "on"):
        result = run_plan(["--config", config, "--world", "2", "--checkpointing", checkpointing, "--seq-len", "256",
                           "--micro-batch", "2", "--validate"], tmp_path / checkpointing)
        (validation,) = result.report["validations"]
        figures[checkpointing] = (validation["predicted_bytes"], max(validation["measured_bytes"]))
    assert figures["on"][0] < 0.8 * figures["off"][0]
    assert figures["on"][1] < 0.8 * figures["off"][1]
