"""Scan and rehearsal agree: what TF020/TF021 flag, the built-in device counts when it runs it
(a host fallback in `torch.neuron.get_fallback_ops()`, or a host sync in
`torchferry.device.host_syncs()`), and what they leave alone, the device runs without either.

Each expression is scanned inside a forward / a training step, and run once on the device in a
fresh interpreter (enabling the device is per process).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchferry.scan.engine import analyse
from torchferry.scan.host_ops import host_ops
from torchferry.scan.rules import RULES_BY_ID
from tests.scan.spellings import EXAMPLES, STATIC

# TF021 reads (loss: a 0-d tensor, x: a vector), and reads that are not syncs.
READS = ["loss.item()", "x.tolist()", "x.cpu()", "bool(loss)", "float(loss)", "int(loss)", "print(loss)",
         'print(f"{loss:.3f}")']
NOT_READS = ["print(x.shape)", "x.dim()", "x.numel()", "len(x)", "x.mean()"]
# Boolean-mask indexing: TorchNeuron's index kernel calls nonzero inside it (indexing.py,
# `convert_indices`); the built-in device counts the sync under the op the code called.
BOOLEAN_INDEX = {"x[mask]"}


@pytest.fixture(scope="module")
def on_device() -> dict[str, dict[str, list[str]]]:
    """expression -> {"fallbacks": ops run on the host, "syncs": host syncs} on the built-in device."""
    expressions = [e for e, _ in EXAMPLES] + STATIC + READS + NOT_READS
    code = textwrap.dedent(f"""
        import contextlib, io, json, warnings
        import torchferry.device
        torchferry.device.enable()
        import torch
        warnings.simplefilter("ignore")
        x = torch.tensor([0.0, 1.0, -2.0, 1.0], device="neuron")
        i = torch.tensor([0, 2, 2, 1], device="neuron")
        mask, r = x > 0, torch.ones(4, dtype=torch.long, device="neuron")
        loss = x.sum()
        ran = {{}}
        for expression in {expressions!r}:
            torch.neuron.clear_op_tracking()
            before = dict(torchferry.device.host_syncs())
            with contextlib.redirect_stdout(io.StringIO()):
                eval(expression)
            after = torchferry.device.host_syncs()
            ran[expression] = {{"fallbacks": sorted(torch.neuron.get_fallback_ops()),
                               "syncs": sorted(k for k, n in after.items() if n != before.get(k, 0))}}
        print(json.dumps(ran))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")},
                               "TORCHFERRY_FALLBACK": "silent"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _in_step(expression: str) -> str:
    return f"for b in loader:\n    loss = model(b)\n    loss.backward()\n    x = model.proj(b)\n    {expression}\n"


@pytest.mark.parametrize(("expression", "op"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_each_data_dependent_spelling_runs_where_the_profile_says(expression, op, on_device):
    where = {o.entry.op: o.on_host for o in host_ops()}[op]
    ran = on_device[expression]
    if where:  # the target runs it on the host
        assert ran == {"fallbacks": [op], "syncs": []}
    else:  # on the device, reading the output size on the host
        called = "aten::index.Tensor" if expression in BOOLEAN_INDEX else op
        assert ran["fallbacks"] == [] and [s.split(" ")[0] for s in ran["syncs"]] == [called]


@pytest.mark.parametrize("expression", STATIC)
def test_static_spellings_run_on_the_device_without_a_sync(expression, on_device):
    assert on_device[expression] == {"fallbacks": [], "syncs": []}


@pytest.mark.parametrize("expression", READS)
def test_each_read_the_scan_flags_is_a_host_sync_on_the_device(expression, on_device):
    hits, _ = analyse(_in_step(expression), [RULES_BY_ID["TF021"]], fix=False)
    assert [h.line for h in hits] == [5]
    assert on_device[expression]["syncs"]  # (printing also runs formatting ops; those are not the point)


@pytest.mark.parametrize("expression", NOT_READS)
def test_what_the_scan_leaves_alone_is_no_host_sync(expression, on_device):
    assert analyse(_in_step(expression), [RULES_BY_ID["TF021"]], fix=False)[0] == []
    assert on_device[expression] == {"fallbacks": [], "syncs": []}
