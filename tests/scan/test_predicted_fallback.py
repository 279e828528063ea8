"""TF028 and the device agree: a call in a step that the scan reports as a predicted host fallback is one the
built-in device counts in `torch.neuron.get_fallback_ops()` when it runs it, and a call it leaves alone runs
on the device. Both read the profile's native-op table (profiles/trn2_ops.toml) through one classification."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchferry.scan.engine import analyse
from torchferry.scan.rules import RULES_BY_ID

REPORTED = ["x.log1p()", "torch.nn.functional.leaky_relu(x)", "torch.nn.functional.mse_loss(x, x)", "x.floor()",
            "torch.nn.functional.avg_pool2d(x4, 2)", "torch.atan2(x, x)"]
# native on trn2; `torch.zeros_like` is composite (empty + fill), which the scan does not judge
NOT_REPORTED = ["x.exp()", "torch.relu(x)", "x.sum()", "torch.nn.functional.gelu(x)", "x.log()", "torch.zeros_like(x)"]


def reported(expression: str) -> bool:
    code = ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
            f"        x4 = x.view(1, 1, 2, 2)\n        return {expression}\n")
    hits, _ = analyse(code, [RULES_BY_ID["TF028"]], fix=False)
    return bool(hits)


@pytest.fixture(scope="module")
def fallbacks() -> dict[str, list[str]]:
    """expression -> the host-fallback ops the built-in device counted running it (one fresh interpreter)."""
    code = textwrap.dedent(f"""
        import json, warnings
        import torchferry.device
        torchferry.device.enable()
        import torch
        warnings.simplefilter("ignore")
        x = torch.tensor([0.5, 1.0, 2.0, 1.5], device="neuron")
        x4 = x.view(1, 1, 2, 2)
        ran = {{}}
        for expression in {REPORTED + NOT_REPORTED!r}:
            torch.neuron.clear_op_tracking()
            eval(expression)
            ran[expression] = sorted(torch.neuron.get_fallback_ops())
        print(json.dumps(ran))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**env, "TORCHFERRY_FALLBACK": "silent"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("expression", REPORTED)
def test_a_reported_call_is_a_host_fallback_on_the_device(expression, fallbacks):
    assert reported(expression)
    assert fallbacks[expression], f"{expression} ran on the device without a host fallback"


@pytest.mark.parametrize("expression", NOT_REPORTED)
def test_a_call_left_alone_runs_on_the_device(expression, fallbacks):
    assert not reported(expression)
    assert fallbacks[expression] == []


def test_outside_a_step_nothing_is_reported():
    hits, _ = analyse("import torch\nx = torch.ones(4)\ny = x.log1p()\n", [RULES_BY_ID["TF028"]], fix=False)
    assert hits == []


def test_the_message_names_the_op_and_the_profiles_reason():
    hits, _ = analyse("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x.log1p()\n",
                      [RULES_BY_ID["TF028"]], fix=False)
    (hit,) = hits
    assert "aten::log1p" in hit.hit.message and "trn2_ops.toml" in hit.hit.message
