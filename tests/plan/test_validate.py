"""The plan's predicted peak per rank agrees within 10% with the peak measured on the built-in
`neuron` device (torch.neuron.max_memory_allocated, second step), for FSDP2 over 2 and 4 ranks on
a small Llama, without and with activation checkpointing (and selective on 2 ranks): `ferry plan
--validate`, in-process."""

from __future__ import annotations

import pytest

from ferryrun import FerryRun
from planrun import run_plan, write_config

from torchferry.status import ExitStatus

CASES = [pytest.param(2, "off", marks=pytest.mark.multiproc),
         pytest.param(2, "on", marks=pytest.mark.multiproc),
         pytest.param(2, "selective", marks=pytest.mark.multiproc),
         pytest.param(4, "off", marks=[pytest.mark.multiproc, pytest.mark.slow]),
         pytest.param(4, "on", marks=[pytest.mark.multiproc, pytest.mark.slow])]


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """`ferry plan --validate` of the small Llama for one world size and checkpointing setting, run once per module:
    the agreement test and the checkpointing test read the same runs (each is a plan trace plus one process per rank)."""
    runs = {}

    def run(world: int, checkpointing: str) -> FerryRun:
        if (world, checkpointing) not in runs:
            folder = tmp_path_factory.mktemp(f"validate-{world}-{checkpointing}")
            runs[world, checkpointing] = run_plan(
                ["-w", str(write_config(folder)), "--world", str(world), "--checkpointing", checkpointing,
                 "--seq-len", "256", "--micro-batch", "2", "--validate"], folder / "out")
        return runs[world, checkpointing]

    return run


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("world, checkpointing", CASES)
def test_predicted_peak_matches_the_measured_peak(validated, world, checkpointing):
    result = validated(world, checkpointing)
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
def test_checkpointing_lowers_both_the_prediction_and_the_measurement(validated):
    """The agreement is not a constant: the layout change moves both figures the same way. The 2-rank runs of the
    test above (4 layers: activations are about half the peak without checkpointing, measured 63.8 MB off vs 43.9 MB
    on) move both figures by far more than the 20% asked; an 8-layer model only widened that margin, at 74 s."""
    figures = {}
    for checkpointing in ("off", "on"):
        (validation,) = validated(2, checkpointing).report["validations"]
        figures[checkpointing] = (validation["predicted_bytes"], max(validation["measured_bytes"]))
    assert figures["on"][0] < 0.8 * figures["off"][0]
    assert figures["on"][1] < 0.8 * figures["off"][1]
