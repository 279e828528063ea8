"""The TorchDynamo backend `neuron`: one Dynamo graph compiled with TorchNeuron's contract.

TorchNeuron compiles each Dynamo graph per input signature (forward and backward apart),
rejects `dynamic=True`, ignores modes other than `default`, refuses the graphs its lowering to
StableHLO cannot take and keeps compiled artifacts on disk. This backend checks that contract
(`contract`, `lowering`), lowers the graph as the host's graph
(`host_graph`) through Inductor's `compile_fx` with forward and backward compilers of its
own (`_DeviceCompiler`: Inductor's `compile_fx_inner`, its code wrapped to run on device
tensors, counting the predicted host fallbacks and the vendor's known issues it holds: `fallbacks`,
`known_issues`), records each compiled graph (`metrics`) and compiles inside torchferry's
persistent cache (`cache`).

`neuron_backend` is the `torch_dynamo_backends` entry point named in pyproject.toml.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from torchferry.device.compile import (cache, contract, fallbacks, host_graph, known_issues, lowering, metrics,
                                       numerics)

BACKEND_NAME = "neuron"


class _DeviceCompiler:
    """AOTAutograd's forward, backward and inference compiler for a device graph (Inductor's
    `inner_compile` hook): Inductor's `compile_fx_inner` on the host graph, recorded in the
    metrics, and wrapped to take and return device tensors (`host_graph.DeviceCode`) unless
    the graph touches no device tensor (`index` None: it stays Inductor's CPU graph)."""

    def __init__(
        self, base_name: str, signature: str, cache_on: bool, compile_id: str | None, index: int | None
    ) -> None:
        self.base_name, self.signature, self.cache_on = base_name, signature, cache_on
        self.compile_id = compile_id  # the backward compiles later, outside Dynamo's context
        self.index = index

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from torch._dynamo.utils import counters
        from torch._inductor.compile_fx import compile_fx_inner

        if self.index is not None:
            lowering.check_graph(gm)  # what TorchNeuron's lowering to StableHLO refuses
        numerics.narrow_64bit(gm)  # the target's 32-bit arithmetic
        host_ops = fallbacks.host_ops(gm) if self.index is not None else []
        issues = known_issues.known_issue_ops(gm) if self.index is not None else []
        before = dict(counters["inductor"])
        start = time.perf_counter_ns()
        # The backward graph is compiled lazily, at the first backward, outside the scope
        # the forward was compiled in: enter it again so both use torchferry's cache.
        with cache.scope():
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        elapsed_us = (time.perf_counter_ns() - start) // 1000
        delta = {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
        if not self.cache_on:
            outcome = "disabled"
        elif delta["fxgraph_cache_hit"]:
            outcome = "hit"
        elif delta["fxgraph_cache_miss"]:
            outcome = "miss"
        else:
            outcome = "bypass"  # Inductor declined to cache this graph (its log says why)
        kind = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
        metrics.add_record(
            graph_name=f"{self.base_name}_{kind}", model_name=self.base_name.rsplit("_graph_", 1)[0],
            graph_node_count=len(gm.graph.nodes), has_collectives=metrics.has_collectives(gm),
            torch_neuronx_compile_us=int(elapsed_us), cache=outcome,
            cache_key=cache.graph_key(gm.code, metrics.signature(example_inputs)),
            input_signature=self.signature, kind=kind, compile_id=self.compile_id,
        )
        return compiled if self.index is None else host_graph.DeviceCode(compiled, self.index, host_ops, issues)


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """The TorchDynamo backend `neuron`: compile one Dynamo graph with TorchNeuron's contract.

    Returns AOTAutograd's compiled function itself, called with the device tensors (see
    `host_graph`); a graph with no device tensor at all compiles as Inductor's CPU graph.
    """
    from torch._inductor.compile_fx import compile_fx

    contract.check_static(gm)
    contract.static_shapes_from_now_on()
    contract.check_mode(mode)
    if options is not None:
        options.setdefault("dynamic", False)  # TorchNeuron writes this into the caller's dict too
    model_name = (options or {}).get("model_name") or "neuron"
    base_name = f"{model_name}_graph_{next(metrics.graph_ids)}"
    signature = metrics.signature(example_inputs)
    compile_id = metrics.compile_id()
    index = host_graph.device_index(gm, example_inputs)
    host_graph.to_host_graph(gm)
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    host_inputs = [host_graph.host_example(x, fake_mode) for x in example_inputs]
    with cache.scope() as cache_on:
        return compile_fx(
            gm, host_inputs, inner_compile=_DeviceCompiler(base_name, signature, cache_on, compile_id, index)
        )


def register() -> None:
    """Make `torch.compile(backend="neuron")` find this backend, and `torch.compile(model)`
    pick it for device graphs (idempotent, cheap).

    When Dynamo is already imported the backend is registered now; otherwise Dynamo loads
    it from the `torch_dynamo_backends` entry point the first time it looks `neuron` up, so
    enabling the device does not pay for importing Dynamo (~2.5 s).
    """
    import sys

    from torchferry.device.compile import selection

    selection.register()
    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(neuron_backend, name=BACKEND_NAME)
