"""The vendor's known issues: ops TorchNeuron's own CI skips, generated from its test evidence into
profiles/trn2_known_issues.toml, warn once per op when a workload runs them and are listed by
`torchferry.device.known_issues()`; a clean twin that avoids them gets no such warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from torchferry.device.profile import KNOWN_ISSUE_KINDS, load_known_issues, load_profile, shipped_profiles
from torchferry.errors import UsageError

# One training model with `remainder` (TorchNeuron: "neuronx-cc compilation error") and its clean twin,
# which computes the same values without it (and without the ops the vendor skips for accuracy: no
# matmul, no division). Three steps each; the warnings recorded are those that name a known issue.
_TWINS = """
import json, warnings
import torch, torchferry.device
torchferry.device.enable()

class Periodic(torch.nn.Module):
    def __init__(self, use_remainder):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((8,), 2.5))
        self.use_remainder = use_remainder

    def forward(self, x):
        y = x * self.scale
        wrapped = torch.remainder(y, 3.0) if self.use_remainder else y - 3.0 * torch.floor(y * (1 / 3.0))
        return torch.relu(wrapped).sum()

out = {}
for use_remainder in (True, False):
    torch.neuron.clear_op_tracking()
    model = Periodic(use_remainder).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            loss = model(torch.linspace(0.1, 4.0, 8, device="neuron"))
            loss.backward()
            opt.step()
            opt.zero_grad()
    name = "remainder" if use_remainder else "twin"
    out[name] = {"warnings": [str(w.message) for w in caught if "known issue" in str(w.message)],
                 "issues": torchferry.device.known_issues(), "loss": loss.item()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def twins():
    """Both models, run once in a fresh process (the warnings come once per op and process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHFERRY_", "NEURON_RT_"))}
    result = subprocess.run([sys.executable, "-c", _TWINS], capture_output=True, text=True, timeout=240,
                            env={**env, "TORCHFERRY_FALLBACK": "silent"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_model_that_uses_remainder_gets_one_warning_naming_reason_and_source(twins):
    (warning,) = twins["remainder"]["warnings"]  # one per op, over three steps
    assert warning.startswith("aten::remainder is a known issue of TorchNeuron 98154b8")
    assert "neuronx-cc compilation error" in warning and "tests/vertical/skip_xfail_ops.py" in warning
    (issue,) = twins["remainder"]["issues"]
    assert (issue["op"], issue["kind"]) == ("aten::remainder", "fails")
    assert issue["calls"] >= 3 and issue["overloads"] == ["aten::remainder.Tensor"]
    assert issue["source"] == "tests/vertical/skip_xfail_ops.py (NEURON_SKIP_OPS)"


def test_the_clean_twin_gets_no_known_issue_and_the_same_result(twins):
    assert twins["twin"]["warnings"] == [] and twins["twin"]["issues"] == []
    assert twins["twin"]["loss"] == pytest.approx(twins["remainder"]["loss"], rel=1e-6)


def test_the_shipped_table_comes_from_the_snapshot_of_the_native_op_table():
    profile = load_profile("trn2")
    known = profile.known_issues
    assert known is not None and known.source_commit == profile.native_ops.source_commit
    ops = {issue.op: issue for issue in known.issues}
    assert ops["aten::clamp_min"].reason == "StableHLO broadcast_dimensions mismatch"
    assert ops["aten::replication_pad2d"].kind == "slow"  # a spec skip: "Long compilation"
    assert "aten::native_dropout" not in ops  # the vendor skips it for comparing random output: a test matter
    assert all(issue.kind in KNOWN_ISSUE_KINDS for issue in known.issues)
    assert "trn2_known_issues" not in shipped_profiles()


def test_a_known_issue_of_an_unknown_kind_is_a_clear_error(tmp_path):
    table = tmp_path / "issues.toml"
    table.write_text('source_commit = "abc"\n[known_issues."aten::remainder"]\nkind = "flaky"\nreason = "r"\n'
                     'scope = "s"\nsource = "f"\n')
    with pytest.raises(UsageError, match=r"issues.toml:2: known issue 'aten::remainder' has kind 'flaky'; valid kinds: fails"):
        load_known_issues(table)
