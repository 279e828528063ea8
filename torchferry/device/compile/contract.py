"""TorchNeuron's `torch.compile` contract: static shapes only, mode `default` only.

TorchNeuron rejects `dynamic=True`, recompiles each new input shape with static shapes,
and ignores (with a warning) modes other than `default`.
"""

from __future__ import annotations

import logging
import warnings

import torch
import torch.fx

from torchferry.errors import UsageError

_log = logging.getLogger("torchferry.compile")
_warned_modes: set[str] = set()


class DynamicShapesError(UsageError):
    """`dynamic=True` or a dynamic dim: TorchNeuron compiles static shapes only."""


class UnsupportedGraphError(UsageError):
    """A graph the built-in device cannot run compiled (e.g. a trainable parameter held as a constant)."""


def static_shapes_from_now_on() -> None:
    """A new shape recompiles with static shapes instead of marking the dim dynamic
    (TorchNeuron's behaviour). Dynamo reads this flag when it traces a frame, and
    `torch.compile` gives a string backend no scoped hook, so the first compilation turns
    automatic dynamic shapes off for the process (logged once)."""
    if torch._dynamo.config.automatic_dynamic_shapes:
        torch._dynamo.config.automatic_dynamic_shapes = False
        _log.info("backend='neuron': torch._dynamo.config.automatic_dynamic_shapes set to False")


def check_static(gm: torch.fx.GraphModule) -> None:
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


def check_mode(mode: str | None) -> None:
    """Warn once per mode other than `default`; the graph then compiles with the default."""
    if mode in (None, "default") or mode in _warned_modes:
        return
    _warned_modes.add(mode)
    message = (
        f"torch.compile(mode={mode!r}) has no effect with backend='neuron': TorchNeuron supports "
        "mode='default' only and ignores the others; compiling with the default mode."
    )
    _log.warning(message)
    warnings.warn(message, UserWarning, stacklevel=3)
