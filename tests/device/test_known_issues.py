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


# Known issues scoped to a dtype: TorchNeuron's op tests skip `_log_softmax` for a "bfloat16 gradient
# mismatch" and `div` for a "correctness mismatch bfloat16". The same classifier head trains in float32 (first, so
# that a warning it gave could not be hidden by the once-per-op rule) and then in bfloat16.
_DTYPE_TWINS = """
import json, warnings
import torch, torchferry.device
torchferry.device.enable()

out = {}
for dtype in (torch.float32, torch.bfloat16):
    torch.neuron.clear_op_tracking()
    scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 10, device="neuron", dtype=dtype))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            x = torch.linspace(-1.0, 1.0, 40, device="neuron", dtype=dtype).reshape(4, 10)
            loss = -torch.log_softmax(x * scale / 3.0, dim=-1)[:, 0].sum()
            loss.backward()
    out[str(dtype)] = {"warnings": [str(w.message) for w in caught if "known issue" in str(w.message)],
                       "issues": torchferry.device.known_issues()}
print(json.dumps(out))
"""


# Known issues inside compiled graphs (compile/known_issues.py): `clamp_min` with a tensor bound (TorchNeuron:
# "StableHLO broadcast_dimensions mismatch", in the float32 and bfloat16 its op tests ran, for the
# `clamp_min.Tensor` overload they called) and `sin` ("bfloat16 gradient mismatch") in one
# `torch.compile(backend="neuron")` function, run twice in float32 then twice in bfloat16; its clean twin
# computes with neither (`relu` and a product) in both dtypes.
_COMPILED_TWINS = """
import json, warnings
import torch, torchferry.device
torchferry.device.enable()

def with_issues(x):
    return torch.clamp_min(torch.sin(x * 2.0), torch.full_like(x, 0.1)).sum()

def twin(x):
    return torch.relu(x * 2.0 - 0.1).sum()

out = {}
for name, fn in (("twin", twin), ("issues", with_issues)):
    compiled = torch.compile(fn, backend="neuron")
    for dtype in (torch.float32, torch.bfloat16):
        torch.neuron.clear_op_tracking()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in range(2):
                compiled(torch.linspace(-1.0, 1.0, 16, device="neuron", dtype=dtype))
        out[f"{name} {dtype}"] = {"warnings": [str(w.message).split(" ")[0] for w in caught
                                               if "known issue" in str(w.message)],
                                  "issues": {i["op"]: i["calls"] for i in torchferry.device.known_issues()}}
print(json.dumps(out))
"""


def _run_fresh(script: str) -> dict:
    """The JSON the script prints last, run in a fresh process (the warnings come once per op and process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHFERRY_", "NEURON_RT_"))}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                            env={**env, "TORCHFERRY_FALLBACK": "silent"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def dtype_twins():
    return _run_fresh(_DTYPE_TWINS)


def test_a_float32_model_gets_no_warning_about_bfloat16_only_issues(dtype_twins):
    assert dtype_twins["torch.float32"] == {"warnings": [], "issues": []}


def test_the_same_model_in_bfloat16_gets_them_once_each_with_their_dtype(dtype_twins):
    bf16 = dtype_twins["torch.bfloat16"]
    assert sorted(w.split(" ")[0] for w in bf16["warnings"]) == ["aten::_log_softmax", "aten::div"]
    (log_softmax,) = [w for w in bf16["warnings"] if w.startswith("aten::_log_softmax")]
    assert "bfloat16 gradient mismatch" in log_softmax and "in bfloat16 only" in log_softmax
    issues = {i["op"]: i for i in bf16["issues"]}
    assert issues.keys() == {"aten::_log_softmax", "aten::div"}
    assert issues["aten::_log_softmax"]["dtypes"] == ["bfloat16"] and issues["aten::_log_softmax"]["calls"] == 2
    assert issues["aten::div"]["overloads"] == ["aten::div.Tensor"]


@pytest.fixture(scope="module")
def twins():
    """Both models, run once in a fresh process."""
    return _run_fresh(_TWINS)


def test_a_model_that_uses_remainder_gets_one_warning_naming_reason_and_source(twins):
    (warning,) = twins["remainder"]["warnings"]  # one per op, over three steps
    assert warning.startswith("aten::remainder is a known issue of TorchNeuron 98154b8")
    assert "neuronx-cc compilation error" in warning and "tests/vertical/skip_xfail_ops.py" in warning
    (issue,) = twins["remainder"]["issues"]
    # the dtypes the vendor's op tests ran it in (tests/vertical/neuron_op_db.py NEURON_DEFAULT_DTYPES)
    assert (issue["op"], issue["kind"], issue["dtypes"]) == ("aten::remainder", "fails", ["bfloat16", "float32"])
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
    # dtype scopes as the vendor's reasons give them; where the reason names no dtype, the dtypes its op
    # tests ran (float32 and bfloat16, tests/vertical/neuron_op_db.py NEURON_DEFAULT_DTYPES)
    assert ops["aten::_log_softmax"].dtypes == ("bfloat16",) and ops["aten::clamp_min"].dtypes == ("bfloat16", "float32")
    assert ops["aten::mm"].dtypes == ("bfloat16",)  # "dtype mismatch bfloat16 vs float32": float32 is the other side
    assert ops["aten::addmm"].dtypes == ("bfloat16", "float32")  # "correctness/dtype mismatch" names no dtype
    # overloads: those PyTorch's OpInfo samples of the op call (the vendor's op tests run them); the
    # Scalar bound F.normalize uses (aten::clamp_min) was never tested there
    assert ops["aten::clamp_min"].overloads == ("aten::clamp_min.Tensor",)
    assert "aten::clamp_min" not in known.by_op and "aten::clamp_min.Tensor" in known.by_op
    assert ops["aten::_log_softmax"].overloads == ()  # the vendor's own extra op test: every overload
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


def test_a_known_issue_with_an_unknown_dtype_is_a_clear_error(tmp_path):
    table = tmp_path / "issues.toml"
    table.write_text('source_commit = "abc"\n[known_issues."aten::remainder"]\nkind = "fails"\nreason = "r"\n'
                     'scope = "s"\nsource = "f"\ndtypes = ["bf16"]\n')
    with pytest.raises(UsageError, match=r"issues.toml:2: known issue 'aten::remainder' has dtypes \['bf16'\], not "
                                         r"torch dtype names"):
        load_known_issues(table)


@pytest.fixture(scope="module")
def compiled_twins():
    return _run_fresh(_COMPILED_TWINS)


@pytest.mark.slow
def test_known_issues_inside_a_compiled_graph_count_per_call_and_honour_dtype_scopes(compiled_twins):
    # float32: clamp_min's unscoped issue, once per call of the graph; sin's bfloat16-only issue is silent.
    assert compiled_twins["issues torch.float32"] == {"warnings": ["aten::clamp_min"],
                                                      "issues": {"aten::clamp_min": 2}}
    # bfloat16: sin's issue now applies (clamp_min warned already: one warning per op and process).
    assert compiled_twins["issues torch.bfloat16"] == {"warnings": ["aten::sin"],
                                                       "issues": {"aten::clamp_min": 2, "aten::sin": 2}}


@pytest.mark.slow
def test_a_compiled_clean_twin_gets_no_known_issue_in_either_dtype(compiled_twins):
    for dtype in ("torch.float32", "torch.bfloat16"):
        assert compiled_twins[f"twin {dtype}"] == {"warnings": [], "issues": {}}


# The vendor's evidence scoped: an op the target runs only as a part of a native composite (linear's addmm,
# a bfloat16 linear's mm) is not run as itself there, and F.normalize's Scalar clamp_min is an overload its
# op tests never called; the same ops called as themselves, with the tested overload, are known issues.
_SCOPED = """
import json, warnings
import torch, torch.nn.functional as F, torchferry.device
torchferry.device.enable()

def run(fn):
    torch.neuron.clear_op_tracking()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return {"warnings": sorted(str(w.message).split(" ")[0] for w in caught if "known issue" in str(w.message)),
            "issues": [i["op"] for i in torchferry.device.known_issues()]}

x = torch.linspace(-1.0, 1.0, 24, device="neuron").reshape(2, 3, 4)
out = {
    "linear": run(lambda: torch.nn.Linear(4, 3).to("neuron")(x).sum().backward()),
    "linear_bf16": run(lambda: torch.nn.Linear(4, 3).to("neuron", torch.bfloat16)(x.bfloat16()).float().sum()),
    "normalize": run(lambda: F.normalize(x, dim=-1)),
    "addmm": run(lambda: torch.addmm(torch.zeros(3, device="neuron"), x[0].T, x[0][:, :3])),
    "clamp_min_tensor": run(lambda: torch.clamp_min(x, torch.zeros_like(x))),
}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def scoped():
    return _run_fresh(_SCOPED)


@pytest.mark.parametrize("case", ["linear", "linear_bf16", "normalize"])
def test_ops_run_inside_a_native_composite_or_in_an_untested_overload_raise_no_known_issue(scoped, case):
    assert scoped[case] == {"warnings": [], "issues": []}


@pytest.mark.parametrize(("case", "op"), [("addmm", "aten::addmm"), ("clamp_min_tensor", "aten::clamp_min")])
def test_the_same_ops_called_as_themselves_in_the_tested_overload_are_known_issues(scoped, case, op):
    assert scoped[case] == {"warnings": [op], "issues": [op]}
