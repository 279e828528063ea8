"""Running a compiled graph on the built-in device: Inductor's CPU code on device memory.

Device memory is host memory, so a device graph is lowered as the same graph on the host:
`to_host_graph` rewrites its `neuron` devices to `cpu` and `host_example` gives AOTAutograd
and Inductor CPU twins of the inputs. Both then see a CPU model, and produce the code they
produce for one (the same decompositions, partition, fusions and kernels).

At run time nothing stands between the caller and AOTAutograd: its own runtime wrapper
(the autograd.Function it builds, input mutations, outputs that alias inputs) is called
with the device tensors themselves, so autograd records one device node per graph, as for
any accelerator. Only the graphs it calls, Inductor's compiled forward, backward or
inference code, are wrapped (`DeviceCode`, the output of the backend's forward and backward
compilers): each device input goes in as a zero-copy host view (a C++ call, no copy), and
the results come back as the device tensors the graph promised, without a copy:

- a result that is an input comes back as that device input;
- a result that is a view of an input becomes the same view of the device input;
- the graph allocates its buffers from the device's cache of freed blocks, as a device op's
  CPU kernel does (`_call_with_device_memory`);
- fresh results are adopted as device memory (one `_adopt_host_results` call per graph run,
  which keeps results that share a buffer sharing one device storage). This is not an op
  and is not counted as one: on TorchNeuron a compiled graph's outputs are device tensors
  already (`neuron_dynamo_backend/executor.py` allocates every output on the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from torchferry.device import _runtime
from torchferry.device.compile.contract import UnsupportedGraphError


def _is_neuron(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "neuron"


def _host_device_arg(x: Any) -> Any:
    if isinstance(x, torch.device) and x.type == "neuron":
        return torch.device("cpu")
    if isinstance(x, str) and (x == "neuron" or x.startswith("neuron:")):
        return "cpu"
    return x


def device_index(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> int | None:
    """The device a Dynamo graph runs on: that of its first `neuron` input, else of its
    first `neuron` result (a graph that makes device tensors from nothing); None when it
    touches no device tensor. Read before `to_host_graph`."""
    (output,) = gm.graph.find_nodes(op="output")
    results = [n.meta.get("example_value") for n in output.all_input_nodes]
    for x in (*example_inputs, *results):
        if _is_neuron(x):
            return x.device.index or 0
    return None


def _is_histc(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target == "histc"
    return node.op == "call_function" and node.target in (torch.histc, torch.Tensor.histc)


def _count_integers_in_float64(gm: torch.fx.GraphModule) -> None:
    """`histc` of an integer tensor, which the CPU refuses ("histogram_cpu" not implemented for
    'Int') and accelerators compute (transformers' mixture-of-experts routing calls it), counted
    in float64 and cast back, as the device's eager kernel does (csrc/CpuGaps.cpp `histc`)."""
    for node in list(gm.graph.nodes):
        source = node.args[0] if _is_histc(node) and node.args else None
        value = source.meta.get("example_value") if isinstance(source, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.is_complex():
            continue
        with gm.graph.inserting_before(node):
            counted = gm.graph.call_method("to", (source, torch.float64))
        node.replace_input_with(source, counted)
        with gm.graph.inserting_after(node):
            back = gm.graph.call_method("to", (node, value.dtype))
        node.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)


def to_host_graph(gm: torch.fx.GraphModule) -> None:
    """Rewrite `gm` in place to run on the host: `neuron` device arguments become `cpu`,
    device tensors held as attributes become zero-copy host views, and ops the CPU lacks
    but the device provides take the device's own route (`_count_integers_in_float64`)."""
    from torch.utils._pytree import tree_map

    host_view = _runtime.core()._host_view
    _count_integers_in_float64(gm)
    for node in gm.graph.nodes:
        node.args = tree_map(_host_device_arg, node.args)
        node.kwargs = tree_map(_host_device_arg, node.kwargs)
        if node.op == "get_attr":
            owner_path, _, name = node.target.rpartition(".")
            owner = gm.get_submodule(owner_path) if owner_path else gm
            value = getattr(owner, name)
            if _is_neuron(value):
                if value.requires_grad:
                    raise UnsupportedGraphError(
                        f"backend='neuron' got the trainable device parameter {node.target!r} as a graph "
                        "constant; its gradient would not reach the device. Keep "
                        "torch._dynamo.config.inline_inbuilt_nn_modules=True (the default) so that "
                        "parameters are graph inputs."
                    )
                delattr(owner, name)
                owner.register_buffer(name, host_view(value), persistent=False)
    gm.recompile()


def host_example(x: Any, fake_mode: Any) -> Any:
    """The CPU twin of a Dynamo example input: a static-shape fake of the device tensor's host
    view, in Dynamo's fake mode (fresh symbols would add shape guards Dynamo cannot place)."""
    if not _is_neuron(x):
        return x
    view = _runtime.core()._host_view(x).requires_grad_(x.requires_grad)
    return fake_mode.from_tensor(view, static_shapes=True) if fake_mode is not None else view


class DeviceCode:
    """One compiled forward, backward or inference graph, called by AOTAutograd with device
    tensors: Inductor's CPU code runs on host views of them, results come back as device
    tensors (see the module docstring). Boxed, like the compiled graph it wraps: AOTAutograd
    passes a list and the graph frees each input as soon as it is done with it.

    Which result is an input, a view of one, or fresh is fixed by the generated code, so the
    first call works it out from the tensors' storages and later calls follow that plan
    (no storage look-ups, and only the inputs a result comes back as stay referenced). A
    first call whose inputs share storage cannot tell which input a view came from; such a
    graph sorts its results on every call.
    """

    def __init__(self, compiled: Any, index: int, host_ops: list[str] | None = None,
                 known_issues: list[str] | None = None) -> None:
        self.compiled, self.index = compiled, index
        self.host_ops = host_ops or []  # counted per call as predicted host fallbacks (`fallbacks`)
        self.known_issues = known_issues or []  # counted per call (`compile.known_issues`)
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__ (functools.wraps)
        core = _runtime.core()
        self._host_view, self._adopt = core._host_view, core._adopt_host_results
        self._run = core._call_with_device_memory
        self._account = core._account_ops
        self._note_known_issues = core._note_graph_known_issues
        self._plan: _Plan | None = None

    def _host(self, args: list[Any]) -> list[Any]:
        host_view = self._host_view
        return [host_view(a) if isinstance(a, torch.Tensor) and not a.is_cpu else a for a in args]

    def __call__(self, args: list[Any]) -> list[Any]:
        if self.host_ops:
            self._account(self.host_ops)
        if self.known_issues:
            self._note_known_issues(self.known_issues)
        plan = self._plan
        if plan is None:
            return self._sort(args)
        kept = {j: args[j] for j in plan.kept}
        host = self._host(args)
        args.clear()
        results = list(self._run(self.compiled, host, self.index))
        del host
        for i, j in plan.inputs:
            results[i] = kept[j]
        for i, j in plan.views:
            r = results[i]
            results[i] = kept[j].as_strided(r.shape, r.stride(), r.storage_offset())
        if plan.fresh:
            for i, t in zip(plan.fresh, self._adopt([results[i] for i in plan.fresh], self.index)):
                results[i] = t
        return results

    def _sort(self, args: list[Any]) -> list[Any]:
        """Run the graph and sort its results by their storages (and make the plan, when the
        inputs' storages tell it unambiguously)."""
        # All inputs stay referenced until the results are sorted, so that no freed input's
        # object id or memory can be taken by a fresh result and mistaken for it.
        device_args = list(args)
        host = self._host(args)
        args.clear()
        position = {id(h): j for j, h in enumerate(host) if isinstance(h, torch.Tensor)}
        on_storage: dict[int, list[int]] = {}  # storage address -> the inputs on it
        for j, h in enumerate(host):
            if isinstance(h, torch.Tensor) and h.untyped_storage().data_ptr():
                on_storage.setdefault(h.untyped_storage().data_ptr(), []).append(j)
        keep_alive = host
        results = list(self._run(self.compiled, list(host), self.index))
        plan, unambiguous = _Plan(), True
        for i, r in enumerate(results):
            if not isinstance(r, torch.Tensor) or not r.is_cpu:
                continue
            j = position.get(id(r))
            if j is not None:
                results[i] = device_args[j]
                plan.inputs.append((i, j))
                continue
            owners = on_storage.get(r.untyped_storage().data_ptr() or -1)
            if owners is None:
                plan.fresh.append(i)
            elif device_args[owners[0]] is not keep_alive[owners[0]]:  # a view of a device input
                results[i] = device_args[owners[0]].as_strided(r.shape, r.stride(), r.storage_offset())
                plan.views.append((i, owners[0]))
                unambiguous &= len(owners) == 1
            # else: a view of a CPU input stays what it is
        if plan.fresh:
            for i, t in zip(plan.fresh, self._adopt([results[i] for i in plan.fresh], self.index)):
                results[i] = t
        if unambiguous:
            plan.kept = sorted({j for _, j in plan.inputs + plan.views})
            self._plan = plan
        return results


class _Plan:
    """Where a compiled graph's results come from: (result, input) pairs for inputs and
    views of device inputs, the positions of fresh results, the inputs to keep referenced."""

    def __init__(self) -> None:
        self.inputs: list[tuple[int, int]] = []
        self.views: list[tuple[int, int]] = []
        self.fresh: list[int] = []
        self.kept: list[int] = []
