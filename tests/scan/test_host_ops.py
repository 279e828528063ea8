"""The scan's host-fallback ops are the device profile's: every data-dependent entry has a Python
spelling, every spelling is an entry, and each spelling the scan flags is one the built-in device
really runs on the host (checked by running it there)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchferry.device.profile import load_profile
from torchferry.scan.engine import analyse
from torchferry.scan.host_ops import SPELLINGS, host_ops
from torchferry.scan.rules import RULES_BY_ID

# Python spelling -> the ATen op it runs (x: float vector, i: int vector, r: repeats tensor, mask: bool mask)
EXAMPLES = [
    ("torch.nonzero(x)", "aten::nonzero"),
    ("x.nonzero()", "aten::nonzero"),
    ("torch.argwhere(x)", "aten::nonzero"),
    ("x.argwhere()", "aten::nonzero"),
    ("torch.where(mask)", "aten::nonzero"),
    ("torch.masked_select(x, mask)", "aten::masked_select"),
    ("x.masked_select(mask)", "aten::masked_select"),
    ("x[mask]", "aten::nonzero"),
    ("x[x > 0]", "aten::nonzero"),
    ("torch.unique(x)", "aten::_unique2"),
    ("x.unique()", "aten::_unique2"),
    ("torch.unique(x, dim=0)", "aten::unique_dim"),
    ("x.unique(dim=0)", "aten::unique_dim"),
    ("torch.unique_consecutive(x)", "aten::unique_consecutive"),
    ("x.unique_consecutive()", "aten::unique_consecutive"),
    ("torch.bincount(i)", "aten::bincount"),
    ("i.bincount()", "aten::bincount"),
    ("torch.repeat_interleave(x, r)", "aten::repeat_interleave.Tensor"),
    ("x.repeat_interleave(r)", "aten::repeat_interleave.Tensor"),
    ("torch.repeat_interleave(r)", "aten::repeat_interleave.Tensor"),
]
# Static-shape spellings of the same ops: neither the scan nor the device sends them to the host.
STATIC = ["x.repeat_interleave(2)", "torch.where(mask, x, 0)", "x.masked_fill(~mask, 0)"]


def _forward(expression: str) -> str:
    return ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x, i, mask):\n"
            f"        r = torch.ones_like(i)\n        return {expression}\n")


def _is_data_dependent(op_name: str) -> bool:
    name, _, overload = op_name.removeprefix("aten::").partition(".")
    return torch.Tag.dynamic_output_shape in getattr(getattr(torch.ops.aten, name), overload or "default").tags


def test_every_data_dependent_profile_entry_has_a_python_spelling():
    entries = [e.op for e in load_profile().host_fallback if _is_data_dependent(e.op)]
    assert entries, "the profile lists no data-dependent host fallbacks; the rule would find nothing"
    assert sorted(set(entries) - set(SPELLINGS)) == []


def test_every_spelling_is_a_profile_entry():
    # a spelling for an op the profile dropped would be dead: remove it with the entry
    assert sorted(set(SPELLINGS) - {e.op for e in load_profile().host_fallback}) == []


def test_the_rule_reads_its_ops_from_the_profile():
    assert [op.entry.op for op in host_ops()] == [e.op for e in load_profile().host_fallback if e.op in SPELLINGS]


def test_every_spelling_has_an_example():
    assert {op for _, op in EXAMPLES} == set(SPELLINGS)


@pytest.mark.parametrize(("expression", "op"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_the_scan_flags_each_spelling_in_a_forward_citing_its_op(expression, op):
    hits, _ = analyse(_forward(expression), [RULES_BY_ID["TF020"]], fix=False)
    assert len(hits) == 1 and f"host_fallback {op}" in hits[0].hit.message


@pytest.mark.parametrize("expression", STATIC)
def test_static_shape_spellings_are_not_flagged(expression):
    assert analyse(_forward(expression), [RULES_BY_ID["TF020"]], fix=False)[0] == []


# The built-in device runs boolean-mask indexing as one aten::index.Tensor kernel on the device;
# TorchNeuron turns the mask into indices with torch.nonzero, a host fallback. A device gap, not a scan error.
DEVICE_GAPS = {"x[mask]", "x[x > 0]"}


@pytest.fixture(scope="module")
def host_ops_on_device() -> dict[str, list[str]]:
    """Each example run on the built-in device (a fresh interpreter): the ops it ran on the host."""
    code = textwrap.dedent(f"""
        import json, warnings
        import torchferry.device
        torchferry.device.enable()
        import torch
        warnings.simplefilter("ignore")
        x = torch.tensor([0.0, 1.0, -2.0, 1.0], device="neuron")
        i = torch.tensor([0, 2, 2, 1], device="neuron")
        mask, r = x > 0, torch.ones(4, dtype=torch.long, device="neuron")
        ran = {{}}
        for expression in {[e for e, _ in EXAMPLES] + STATIC!r}:
            torch.neuron.clear_op_tracking()
            eval(expression)
            ran[expression] = sorted(torch.neuron.get_fallback_ops())
        print(json.dumps(ran))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")},
                               "TORCHFERRY_FALLBACK": "silent"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("expression", "op"), [
    pytest.param(e, op, marks=pytest.mark.xfail(strict=True, reason="built-in device runs boolean indexing "
                                                 "on the device; TorchNeuron runs nonzero on the host"))
    if e in DEVICE_GAPS else (e, op) for e, op in EXAMPLES], ids=[e for e, _ in EXAMPLES])
def test_the_built_in_device_runs_each_flagged_spelling_on_the_host(expression, op, host_ops_on_device):
    """Scan and rehearsal agree: what the scan flags, the device counts in get_fallback_ops()."""
    assert host_ops_on_device[expression] == [op]


@pytest.mark.parametrize("expression", STATIC)
def test_the_built_in_device_runs_the_static_spellings_on_the_device(expression, host_ops_on_device):
    assert host_ops_on_device[expression] == []
