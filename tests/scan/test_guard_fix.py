"""A fix never makes a block run that did not run before (issue 26): renaming the guard
`if torch.cuda.is_available():` to `torch.accelerator.is_available()` is made only when every
CUDA-only call in the blocks it decides is fixed too; otherwise the guard is reported, not rewritten."""

import os
import subprocess
import sys
import textwrap

import pytest

from torchferry.scan.rewrite import ACCELERATOR

PEAK = textwrap.dedent("""\
    import torch

    x = torch.ones(2)
    if torch.cuda.is_available():
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print("sum", x.sum().item())
""")


def test_a_guard_over_an_unfixable_cuda_call_is_reported_and_left_as_it_is(fixed, rule_ids):
    assert fixed(PEAK) == PEAK
    assert rule_ids(PEAK) == ["TF003", "TF013"]


def test_the_report_names_the_call_that_would_run_unfixed(ferry, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PEAK)
    result = ferry("scan", str(script), "--format", "json")
    guard = next(f for f in result.json["findings"] if f["rule_id"] == "TF003")
    assert not guard["fixable"] and "TF013, line 5" in guard["message"]


def test_a_guard_whose_block_is_fixed_too_is_rewritten_with_it(fixed):
    code = "import torch\nif torch.cuda.is_available():\n    model = model.cuda()\n    torch.cuda.synchronize()\n"
    assert fixed(code) == (f"import torch\nif torch.accelerator.is_available():\n    model = model.to({ACCELERATOR})\n"
                           "    torch.accelerator.synchronize()\n")


@pytest.mark.parametrize("code", [
    'import torch\ndevice = "cuda:0" if torch.cuda.is_available() else "cpu"\n',  # a stored device string
    "import torch\nif not torch.cuda.is_available():\n    pass\nelse:\n    torch.cuda.reset_peak_memory_stats()\n",
    "import torch\nwhile torch.cuda.is_available() and n:\n    print(torch.cuda.memory_summary())\n",
])
def test_every_guard_form_keeps_its_unfixable_block_unchanged(code, fixed):
    assert "torch.cuda.is_available()" in fixed(code)


def test_an_unguarded_call_is_still_renamed(fixed):
    assert fixed("import torch\nok = torch.cuda.is_available()\n") == "import torch\nok = torch.accelerator.is_available()\n"


@pytest.mark.timeout(180)
def test_the_fixed_script_prints_what_the_original_printed_on_the_device(ferry, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PEAK)
    ferry("scan", str(script), "--fix")

    def run() -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")}
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                              env={**env, "TORCHFERRY_DEVICE": "neuron"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    assert run() == "sum 2.0\n"  # no "peak memory 0.0 MiB": the guarded block still does not run
    assert script.read_text() == PEAK
