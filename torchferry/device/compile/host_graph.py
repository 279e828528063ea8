"""Running a compiled graph on the built-in device: Inductor's CPU code on zero-copy views.

Device memory is host memory, so a compiled graph is the same graph with its `neuron`
devices replaced by `cpu`, called on zero-copy CPU views of the device tensors.

- Autograd stays on the device: `_HostGraph` is an autograd.Function over the `neuron`
  tensors whose forward and backward run Inductor's compiled forward and backward graphs
  (AOTAutograd on the host views) and hand results back without copying.
- Results come back as device tensors without a copy: a result that is (a view of) an input
  becomes the same view of the device input; fresh results are adopted as device memory
  (one `_adopt_host_results` call per graph run; not an op, so not accounted as one: on
  TorchNeuron a compiled graph's outputs are device tensors already).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def to_host_graph(gm: torch.fx.GraphModule) -> None:
    """Rewrite `gm` in place to run on the host: `neuron` device arguments become `cpu`,
    device tensors held as attributes become zero-copy host views."""
    from torch.utils._pytree import tree_map

    host_view = _runtime.core()._host_view
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


# --------------------------------------------------------------- results back
def _to_device(
    results: Sequence[Any], devices: Sequence[torch.device | None], device_args: Sequence[Any], host_args: Sequence[Any]
) -> list[Any]:
    """Host results as the tensors the graph promised: views of device inputs stay views of
    them, fresh host results become device tensors without a copy."""
    owners = {h.untyped_storage().data_ptr(): d for h, d in zip(host_args, device_args) if _is_neuron(d)}
    out = list(results)
    fresh: list[int] = []
    for i, (r, dev) in enumerate(zip(results, devices)):
        if not isinstance(r, torch.Tensor) or r.device.type != "cpu":
            continue
        owner = owners.get(r.untyped_storage().data_ptr()) if r.untyped_storage().nbytes() else None
        if dev is None or dev.type != "neuron":
            if owner is not None:
                out[i] = r.clone()  # a host copy of device memory must not alias it
        elif owner is not None:
            out[i] = owner.as_strided(r.shape, r.stride(), r.storage_offset())
        else:
            fresh.append(i)
    if fresh:
        by_index: dict[int, list[int]] = {}
        for i in fresh:
            by_index.setdefault(devices[i].index or 0, []).append(i)
        for index, positions in by_index.items():
            adopted = _runtime.core()._adopt_host_results([results[i] for i in positions], index)
            for i, tensor in zip(positions, adopted):
                out[i] = tensor
    return out


class _HostGraph(torch.autograd.Function):
    """The device-side autograd node of one compiled graph: forward and backward run
    Inductor's compiled graphs on host views; gradients come back as device tensors."""

    @staticmethod
    def forward(ctx: Any, graph: "CompiledGraph", *args: Any) -> tuple[Any, ...]:
        host = [graph.host_input(a, grad=True) for a in args]
        with torch.enable_grad():
            results = graph.compiled(*host)
        ctx.graph, ctx.device_args, ctx.host_args, ctx.host_results = graph, args, host, results
        out = _to_device(results, graph.output_devices, args, host)
        ctx.mark_non_differentiable(
            *[o for o, r in zip(out, results) if isinstance(o, torch.Tensor) and not r.requires_grad]
        )
        return tuple(out)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        pairs = [
            (r, g)
            for r, g in zip(ctx.host_results, grads)
            if isinstance(r, torch.Tensor) and r.requires_grad and g is not None
        ]
        wanted = [i for i, h in enumerate(ctx.host_args) if isinstance(h, torch.Tensor) and h.requires_grad]
        device_grads = [g for _, g in pairs]
        host_grads = [_runtime.core()._host_view(g) if _is_neuron(g) else g for g in device_grads]
        found = torch.autograd.grad(
            [r for r, _ in pairs], [ctx.host_args[i] for i in wanted], host_grads, allow_unused=True
        )
        devices = [ctx.device_args[i].device for i in wanted]
        back = _to_device(list(found), devices, device_grads, host_grads)
        result: list[Any] = [None] * len(ctx.device_args)
        for i, g in zip(wanted, back):
            result[i] = g
        del ctx.host_results, ctx.host_args
        return (None, *result)


class CompiledGraph:
    """What the backend returns to Dynamo: the host-compiled graph, called on device tensors."""

    def __init__(self, compiled: Callable[..., Any], output_devices: list[torch.device | None]) -> None:
        self.compiled = compiled
        self.output_devices = output_devices

    @staticmethod
    def host_input(x: Any, grad: bool = False) -> Any:
        if _is_neuron(x):
            view = _runtime.core()._host_view(x)
            return view.requires_grad_() if grad and x.requires_grad else view
        if grad and isinstance(x, torch.Tensor) and x.requires_grad:
            return x.detach().requires_grad_()  # its own leaf, so the gradient is returned, not accumulated
        return x

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return list(_HostGraph.apply(self, *args))
        host = [self.host_input(a) for a in args]
        return _to_device(self.compiled(*host), self.output_devices, args, host)


def output_devices(gm: torch.fx.GraphModule) -> list[torch.device | None]:
    (output,) = gm.graph.find_nodes(op="output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    devices = []
    for node in values:
        value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        devices.append(value.device if isinstance(value, torch.Tensor) else None)
    return devices
