"""Bad input to `ferry plan` is a usage error (exit 2) naming the bad value and the valid ones, and
none of it reaches the tracer; a model FakeTensor cannot step is an error naming the op."""

from __future__ import annotations

import textwrap

import pytest

from planrun import run_plan, write_config

from torchferry.status import ExitStatus


@pytest.mark.parametrize("args, expected", [
    (["--size", "13b"], ["--size '13b'", "1b, 8b, 70b"]),
    (["-w", "does-not-exist.json"], ["does-not-exist.json", "cannot be read"]),
    (["--size", "8b", "--world", "64", "--tp", "3"], ["world size 64 does not factor into FSDP ? x TP 3",
                                                       "64x1, 32x2, 16x4, 8x8, 4x16, 2x32, 1x64"]),
    (["--size", "8b", "--world", "64", "--fsdp", "32", "--tp", "4"], ["FSDP 32 x TP 4", "64x1, 32x2"]),
    (["--size", "8b", "--world", "64", "--batch-size", "100"], ["global batch of 100", "64 data-parallel ranks",
                                                           "multiple of 64, e.g. 64 or 128"]),
    (["--size", "8b", "--world", "64", "--tp", "2", "--batch-size", "48"], ["32 data-parallel ranks (world 64 / TP 2)"]),
    (["--size", "8b", "--capacity", "0"], ["--capacity='0' is not a positive memory size", "GiB"]),
    (["--size", "8b", "--capacity=-24GiB"], ["--capacity='-24GiB' is not a positive memory size"]),
    (["--size", "8b", "--tp", "16"], ["TP 16 does not divide", "key-value heads (8)", "Valid TP degrees", "1, 2, 4, 8"]),
    (["--size", "8b", "--checkpointing", "sometimes"], ["'sometimes'", "off, on, selective"]),
    (["--size", "8b", "--precision", "fp8"], ["'fp8'", "bf16-mixed, bf16, fp32"]),
    (["--size", "8b", "--target-instance", "trn9.huge"], ["'trn9.huge'", "trn2.48xlarge"]),
    (["--size", "8b", "--ref-instance", "h100.box"], ["'h100.box'", "p5.48xlarge"]),
    (["--size", "8b", "--validate"], ["--world 64 is too many", "--world 2 to 8"]),
    (["--size", "8b", "-w", "x.json"], ["--size and -w", "give one of"]),
    # hostile values (docs/check/errors.md): 0 used to plan the instance's 64 ranks, 10000000 to trace for minutes
    (["--size", "8b", "--world", "0"], ["--world must be a whole number at least 1 and at most 1024 (got 0)"]),
    (["--size", "8b", "--world", "10000000"], ["--world must be a whole number at least 1 and at most 1024 "
                                                "(got 10000000)", "one shard per rank"]),
    (["--size", "8b", "--micro-batch", "0"], ["--micro-batch must be a whole number at least 1 (got 0)"]),
])
def test_bad_input_is_a_usage_error_before_tracing(tmp_path, no_trace, args, expected):
    result = run_plan(args, tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert result.stderr.startswith("ferry plan: "), result.stderr
    assert result.stderr.count("ferry plan: ") == 1 and "ferry plan: ferry" not in result.stderr  # one prefix
    for text in expected:
        assert text in result.stderr
    assert "Traceback" not in result.stderr
    assert result.report is None


def test_config_with_unknown_model_type_lists_valid_ones(tmp_path, no_trace):
    result = run_plan(["-w", str(write_config(tmp_path, model_type="not-a-model"))], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE
    assert "model_type 'not-a-model'" in result.stderr and "llama" in result.stderr


def test_config_that_is_not_json_says_so(tmp_path, no_trace):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    result = run_plan(["-w", str(path)], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE and "is not JSON" in result.stderr


UNTRACEABLE = textwrap.dedent("""
    import torch

    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            if x.sum().item() > 0:  # control flow on a value: FakeTensor has none
                x = x * 2
            return x

    def build(batch_size=2, seq_len=4):
        return {"model": Gate(), "batch": lambda device, seed: torch.ones(batch_size, 8, device=device),
                "loss": lambda out, batch: out.sum()}
""")


@pytest.mark.timeout(120)
def test_model_that_cannot_be_traced_names_the_op(tmp_path):
    path = tmp_path / "gate.py"
    path.write_text(UNTRACEABLE)
    result = run_plan(["--workload", f"{path}:build", "--world", "2"], tmp_path / "out")
    assert result.exit_status == ExitStatus.USAGE, result.stderr
    assert "cannot be traced on FakeTensor" in result.stderr
    assert "aten._local_scalar_dense" in result.stderr and ".item()" in result.stderr
