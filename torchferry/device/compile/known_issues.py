"""The target vendor's known issues inside compiled graphs: an op the vendor's own CI skips
(the profile's known-issue table, docs/device/fidelity.md) is reported when it runs in a
`torch.compile(backend="neuron")` graph, as the eager device reports it.

The eager device judges a dtype-scoped issue ("bfloat16 gradient mismatch") on the tensors
of each call; a graph's ops are fixed when it compiles, so their dtypes are read once from
the FX nodes' example values (`meta["val"]`) and each call of the graph counts the issues it
holds. An op that the profile also runs on the host is already counted, and warned about, by
the fallback accounting (`fallbacks`); its unscoped issue is not counted twice.

Whether a vendor op skipped in its op tests also fails inside a whole-graph compile is not in
the vendor's evidence: its op tests run ops one at a time. TorchNeuron lowers both through
torch-mlir to StableHLO (`torch_neuronx/python_ops/torch_mlir/`, `neuron_dynamo_backend/`),
so the same lowering is reached either way; the report says "known issue", never "fails".
"""

from __future__ import annotations

import torch
import torch.fx

from torchferry.device import target
from torchferry.device.compile.fallbacks import aten_calls


def _dtypes(node: torch.fx.Node) -> set[torch.dtype]:
    """The dtypes of the tensors a graph node takes (what the eager device checks per call)."""
    dtypes = set()
    for arg in (*node.args, *node.kwargs.values()):
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            value = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
            if isinstance(value, torch.Tensor):
                dtypes.add(value.dtype)
    return dtypes


def known_issue_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The ATen ops of `gm` that meet a known issue of the target, one entry per call in the
    graph: an unscoped issue whatever the dtypes (unless the op runs on the host and is
    counted as a fallback), a dtype-scoped one when the node takes a tensor of its dtypes."""
    ops = []
    for node, name in aten_calls(gm):
        issue = target.known_issue(name)
        if issue is None:
            continue
        listed, scope = issue
        if scope and scope & _dtypes(node) or not scope and not target.runs_on_host(listed):
            ops.append(listed)
    return ops
