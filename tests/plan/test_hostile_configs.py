"""A config a hostile user (or a typo) hands `ferry plan`: sizes that describe no model are refused naming the key and
the value, a model too deep to trace in reasonable time is refused with the predicted time, and a trace that runs
says how long it will take before it starts and what it is doing while it runs. Each case: exit status and the
message's first line."""

from __future__ import annotations

import pytest
from ferryrun import ferry
from planrun import run_plan, write_config

from torchferry.status import ExitStatus


@pytest.mark.parametrize("overrides, line", [
    ({"hidden_size": -256}, "hidden_size is -256; a size is a whole number of at least 1."),
    ({"num_hidden_layers": 0}, "num_hidden_layers is 0; a model has at least one layer."),
    ({"vocab_size": 0}, "vocab_size is 0; a size is a whole number of at least 1."),
    ({"num_attention_heads": 2.5}, "num_attention_heads is 2.5; a size is a whole number of at least 1."),
    ({"intermediate_size": "big"}, "intermediate_size is 'big'; a size is a whole number of at least 1."),
])
def test_sizes_that_describe_no_model_are_refused_before_anything_is_built(tmp_path, no_trace, overrides, line):
    path = write_config(tmp_path, **overrides)
    result = run_plan(["-w", str(path)], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0] == (f"ferry plan: config {str(path)!r}: {line} Fix the config (its published "
                                             "values), or name a model whose config is (a model type such as llama, "
                                             "a Hub id).")


def test_a_config_aliasing_its_sizes_is_checked_under_its_own_names(tmp_path, no_trace):
    path = tmp_path / "gpt2.json"
    path.write_text('{"model_type": "gpt2", "n_embd": -8, "n_layer": 2, "n_head": 2}')
    result = run_plan(["-w", str(path)], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE and "hidden_size is -8" in result.stderr.splitlines()[0]


def test_an_absurdly_deep_model_is_refused_with_the_predicted_time(tmp_path, no_trace):
    path = write_config(tmp_path, hidden_size=1_048_576, num_hidden_layers=100_000, num_attention_heads=8192,
                        num_key_value_heads=8192)
    result = run_plan(["-w", str(path)], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith(
        "ferry plan: llama (config) has 100,000 blocks (num_hidden_layers): tracing one step would take about 428 days "
        "here")
    assert "A trace takes at most 1,024 blocks" in result.stderr


def test_the_trace_says_its_expected_time_before_it_starts_and_its_phase_while_it_runs(tmp_path, monkeypatch):
    import torchferry.workloads.footprint.trace as trace

    monkeypatch.setattr(trace, "PROGRESS_EVERY_S", 0.05)
    code, _, stderr = ferry("plan", "-w", str(write_config(tmp_path)), "--world", "2", "--seq-len", "64",
                            "-o", str(tmp_path / "out"))
    assert code in (ExitStatus.SUCCESS, ExitStatus.NEGATIVE_RESULT), stderr
    lines = stderr.splitlines()
    assert lines[0] == ("ferry plan: tracing llama (config), FSDP 2 x TP 1, AC off on 2 fake ranks (4 blocks: about "
                        "1 s on 2 cores) ...")
    still = [line for line in lines if line.startswith("ferry plan: still tracing (")]
    assert still and all(" of about 1 s): " in line for line in still)
    phases = {line.split("): ", 1)[1] for line in still}
    assert phases <= {"building on the meta device", "sharding the parameters (FSDP2)", "creating the optimizer state",
                      "backward", "optimizer step", *(f"forward, block {i} of 4" for i in range(1, 5))}, phases


def test_the_prediction_matches_the_measured_points():
    from torchferry.workloads.footprint.trace import duration, predicted_seconds

    for blocks, measured in ((16, 4.3), (32, 11.0), (64, 28.6), (128, 86.8)):  # trace.py's measurements
        assert abs(predicted_seconds(blocks) - measured) <= 0.1 * measured
    assert [duration(s) for s in (40, 600, 12_600, 3.7e7)] == ["40 s", "10.0 min", "3.5 h", "428 days"]
