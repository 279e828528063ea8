"""`torch.compile(backend="neuron")` for the built-in device, with TorchNeuron's contract.

TorchNeuron compiles each Dynamo graph per input signature (forward and backward apart),
rejects `dynamic=True`, ignores modes other than `default` and keeps compiled artifacts on
disk. This backend reproduces that contract and runs the graphs through Inductor's CPU code
generation: device memory is host memory, so a compiled graph is the same graph with its
`neuron` devices replaced by `cpu`, called on zero-copy CPU views of the device tensors.

- Autograd stays on the device: `_HostGraph` is an autograd.Function over the `neuron`
  tensors whose forward and backward run Inductor's compiled forward and backward graphs
  (AOTAutograd on the host views) and hand results back without copying.
- Results come back as device tensors without a copy: a result that is (a view of) an input
  becomes the same view of the device input; a fresh result is adopted as device memory by
  the device's own op execution (`torchferry::adopt_results`, one call per graph run).
- The shape contract: `dynamic=True` (or `mark_dynamic`) raises `DynamicShapesError`;
  automatic dynamic shapes are switched off, so each new shape compiles a new graph.
- `torch.neuron.get_dynamo_metrics()` gives one record per compiled graph, and the graph
  breaks Dynamo reported with their reasons.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from torchferry.device import compile_cache
from torchferry.errors import UsageError

BACKEND_NAME = "neuron"
_log = logging.getLogger("torchferry.compile")


class DynamicShapesError(UsageError):
    """`dynamic=True` or a dynamic dim: TorchNeuron compiles static shapes only."""


class UnsupportedGraphError(UsageError):
    """A graph the built-in device cannot run compiled (e.g. a trainable parameter held as a constant)."""


# ---------------------------------------------------------------------- metrics
_lock = threading.Lock()
_records: list[dict[str, Any]] = []
_graph_ids = itertools.count()
_break_baseline: dict[str, int] = {}
_warned_modes: set[str] = set()


def _rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _graph_breaks() -> list[dict[str, Any]]:
    from torch._dynamo.utils import counters

    breaks = []
    for reason, count in counters["graph_break"].items():
        new = count - _break_baseline.get(reason, 0)
        if new > 0:
            breaks.append({"reason": reason, "count": new})
    return breaks


def get_dynamo_metrics() -> dict[str, Any]:
    """This rank's compilations since the last reset.

    ``graphs``: one record per compiled graph (forward, backward or inference), with
    TorchNeuron's field names ``graph_name``, ``graph_node_count`` and
    ``torch_neuronx_compile_us``, plus ``cache`` (hit, miss, bypass or disabled),
    ``cache_key``, ``input_signature`` and ``kind`` (forward, backward, inference, or
    cached: forward and backward loaded together from AOTAutograd's cache). ``graph_breaks``: Dynamo's break reasons with counts.
    """
    with _lock:
        graphs = [dict(r) for r in _records]
    return {"rank": _rank(), "graphs": graphs, "graph_breaks": _graph_breaks()}


def reset_dynamo_metrics() -> None:
    """Forget the records and graph breaks so far (Dynamo's own counters are left alone)."""
    from torch._dynamo.utils import counters

    with _lock:
        _records.clear()
        _break_baseline.clear()
        _break_baseline.update(counters["graph_break"])


# ------------------------------------------------------------------ the contract
def _static_shapes_from_now_on() -> None:
    """A new shape recompiles with static shapes instead of marking the dim dynamic
    (TorchNeuron's behaviour). Dynamo reads this flag when it traces a frame, and
    `torch.compile` gives a string backend no scoped hook, so the first compilation turns
    automatic dynamic shapes off for the process (logged once)."""
    if torch._dynamo.config.automatic_dynamic_shapes:
        torch._dynamo.config.automatic_dynamic_shapes = False
        _log.info("backend='neuron': torch._dynamo.config.automatic_dynamic_shapes set to False")


def _check_static(gm: torch.fx.GraphModule) -> None:
    dynamic_inputs = []
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymInt) or (
            isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape)
        ):
            dynamic_inputs.append(node.target)
    if not torch._dynamo.config.assume_static_by_default or dynamic_inputs:
        cause = (
            "torch.compile(..., dynamic=True) was requested"
            if not torch._dynamo.config.assume_static_by_default
            else f"inputs {dynamic_inputs} have dims marked dynamic (torch._dynamo.mark_dynamic)"
        )
        raise DynamicShapesError(
            f"backend='neuron' compiles static shapes only (TorchNeuron rejects dynamic shapes), but "
            f"{cause}. Valid: dynamic=None or dynamic=False; each new input shape then compiles its "
            "own graph. Next step: drop dynamic=True / mark_dynamic, and pad or bucket the varying "
            "dims (e.g. pad sequences to a few fixed lengths) so that only a few graphs compile."
        )


def _check_mode(mode: str | None) -> None:
    if mode in (None, "default") or mode in _warned_modes:
        return
    _warned_modes.add(mode)
    message = (
        f"torch.compile(mode={mode!r}) has no effect with backend='neuron': TorchNeuron supports "
        "mode='default' only and ignores the others; compiling with the default mode."
    )
    _log.warning(message)
    warnings.warn(message, UserWarning, stacklevel=3)


# ------------------------------------------------------------- host graph
def _is_neuron(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "neuron"


def _core() -> Any:
    from torchferry.device import _runtime

    return _runtime.core()


def _host_device_arg(x: Any) -> Any:
    if isinstance(x, torch.device) and x.type == "neuron":
        return torch.device("cpu")
    if isinstance(x, str) and (x == "neuron" or x.startswith("neuron:")):
        return "cpu"
    return x


def _to_host_graph(gm: torch.fx.GraphModule) -> None:
    """Rewrite `gm` in place to run on the host: `neuron` device arguments become `cpu`,
    device tensors held as attributes become zero-copy host views."""
    from torch.utils._pytree import tree_map

    host_view = _core()._host_view
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


def _host_example(x: Any, fake_mode: Any) -> Any:
    """The CPU twin of a Dynamo example input: a static-shape fake of the device tensor's host
    view, in Dynamo's fake mode (fresh symbols would add shape guards Dynamo cannot place)."""
    if not _is_neuron(x):
        return x
    view = _core()._host_view(x).requires_grad_(x.requires_grad)
    return fake_mode.from_tensor(view, static_shapes=True) if fake_mode is not None else view


def _signature(example_inputs: Sequence[Any]) -> str:
    parts = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype).removeprefix("torch.")
            parts.append(f"{x.device.type}:{dtype}{list(x.shape)}{'' if x.is_contiguous() else list(x.stride())}")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts)


# --------------------------------------------------------------- results back
def _define_adopt_op() -> None:
    """`torchferry::adopt_results(Tensor anchor) -> Tensor[]`: a CPU kernel that returns the
    host tensors staged in `_staged`. Called with a device `anchor`, the device's op execution
    runs it and adopts each returned tensor's bytes as device memory (no copy)."""
    lib = torch.library.Library("torchferry", "FRAGMENT")
    lib.define("adopt_results(Tensor anchor) -> Tensor[]")
    lib.impl("adopt_results", lambda anchor: _staged.pop(), "CPU")
    _libraries.append(lib)


_staged: list[list[torch.Tensor]] = []
_libraries: list[Any] = []
_anchors: dict[int, torch.Tensor] = {}


def _adopt(tensors: list[torch.Tensor], index: int) -> list[torch.Tensor]:
    if not _libraries:
        _define_adopt_op()
    anchor = _anchors.get(index)
    if anchor is None:
        anchor = _anchors[index] = torch.empty(0, device=torch.device("neuron", index))
    _staged.append(tensors)
    return list(torch.ops.torchferry.adopt_results(anchor))


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
            for i, adopted in zip(positions, _adopt([results[i] for i in positions], index)):
                out[i] = adopted
    return out


class _HostGraph(torch.autograd.Function):
    """The device-side autograd node of one compiled graph: forward and backward run
    Inductor's compiled graphs on host views; gradients come back as device tensors."""

    @staticmethod
    def forward(ctx: Any, graph: "_CompiledGraph", *args: Any) -> tuple[Any, ...]:
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
        host_grads = [_core()._host_view(g) if _is_neuron(g) else g for g in device_grads]
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


class _CompiledGraph:
    """What the backend returns to Dynamo: the host-compiled graph, called on device tensors."""

    def __init__(self, compiled: Callable[..., Any], output_devices: list[torch.device | None]) -> None:
        self.compiled = compiled
        self.output_devices = output_devices

    @staticmethod
    def host_input(x: Any, grad: bool = False) -> Any:
        if _is_neuron(x):
            view = _core()._host_view(x)
            return view.requires_grad_() if grad and x.requires_grad else view
        if grad and isinstance(x, torch.Tensor) and x.requires_grad:
            return x.detach().requires_grad_()  # its own leaf, so the gradient is returned, not accumulated
        return x

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return list(_HostGraph.apply(self, *args))
        host = [self.host_input(a) for a in args]
        return _to_device(self.compiled(*host), self.output_devices, args, host)


def _output_devices(gm: torch.fx.GraphModule) -> list[torch.device | None]:
    (output,) = gm.graph.find_nodes(op="output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    devices = []
    for node in values:
        value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        devices.append(value.device if isinstance(value, torch.Tensor) else None)
    return devices


class _Recorder:
    """`inner_compile` for Inductor that records each forward/backward graph it compiles."""

    def __init__(self, base_name: str, signature: str, cache_on: bool) -> None:
        self.base_name, self.signature, self.cache_on = base_name, signature, cache_on

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from torch._dynamo.utils import counters
        from torch._inductor.compile_fx import compile_fx_inner

        before = dict(counters["inductor"])
        start = time.perf_counter_ns()
        # The backward graph is compiled lazily, at the first backward, outside the scope
        # the forward was compiled in: enter it again so both use torchferry's cache.
        with compile_cache.scope():
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        elapsed_us = (time.perf_counter_ns() - start) // 1000
        delta = {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
        if not self.cache_on:
            cache = "disabled"
        elif delta["fxgraph_cache_hit"]:
            cache = "hit"
        elif delta["fxgraph_cache_miss"]:
            cache = "miss"
        else:
            cache = "bypass"  # Inductor declined to cache this graph (its log says why)
        kind = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
        _add_record(
            graph_name=f"{self.base_name}_{kind}", graph_node_count=len(gm.graph.nodes),
            torch_neuronx_compile_us=int(elapsed_us), cache=cache,
            cache_key=compile_cache.graph_key(gm.code, _signature(example_inputs)),
            input_signature=self.signature, kind=kind,
        )
        return compiled


def _add_record(**record: Any) -> None:
    record["rank"] = _rank()
    with _lock:
        _records.append(record)


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """The TorchDynamo backend `neuron`: compile one Dynamo graph with TorchNeuron's contract."""
    from torch._inductor.compile_fx import compile_fx

    _check_static(gm)
    _static_shapes_from_now_on()
    _check_mode(mode)
    if options is not None:
        options.setdefault("dynamic", False)  # TorchNeuron writes this into the caller's dict too
    model_name = (options or {}).get("model_name") or "neuron"
    base_name = f"{model_name}_graph_{next(_graph_ids)}"
    signature = _signature(example_inputs)
    output_devices = _output_devices(gm)
    _to_host_graph(gm)
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    host_inputs = [_host_example(x, fake_mode) for x in example_inputs]
    from torch._dynamo.utils import counters

    hits_before = counters["aot_autograd"]["autograd_cache_hit"]
    start = time.perf_counter_ns()
    with compile_cache.scope() as cache_on:
        compiled = compile_fx(gm, host_inputs, inner_compile=_Recorder(base_name, signature, cache_on))
    if counters["aot_autograd"]["autograd_cache_hit"] > hits_before:
        # AOTAutograd's cache returned forward and backward together, without compiling either.
        _add_record(
            graph_name=f"{base_name}_cached", graph_node_count=len(gm.graph.nodes),
            torch_neuronx_compile_us=(time.perf_counter_ns() - start) // 1000, cache="hit",
            cache_key=compile_cache.graph_key(gm.code, signature), input_signature=signature, kind="cached",
        )
    return _CompiledGraph(compiled, output_devices)


def register() -> None:
    """Make `torch.compile(backend="neuron")` find this backend (idempotent, cheap).

    When Dynamo is already imported the backend is registered now; otherwise Dynamo loads
    it from the `torch_dynamo_backends` entry point the first time it looks `neuron` up, so
    enabling the device does not pay for importing Dynamo (~2.5 s).
    """
    import sys

    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(neuron_backend, name=BACKEND_NAME)


__all__ = [
    "BACKEND_NAME",
    "DynamicShapesError",
    "UnsupportedGraphError",
    "get_dynamo_metrics",
    "neuron_backend",
    "register",
    "reset_dynamo_metrics",
]
