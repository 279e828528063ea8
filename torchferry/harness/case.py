"""A model on one device, as both measuring workers handle it: copies, inputs, probes, failures, captures.

`ferry check`'s worker (torchferry.check.worker) and `ferry coverage`'s (torchferry.coverage.worker)
each put a model on a reference and a target device and compare what comes out. What they share lives
here, once:

- copies: ``fresh`` (a deep copy of the pristine CPU model on a device, in eval mode for inference, and
  in float64 for the golden run) and ``moved`` (inputs on a device, floating tensors cast for float64);
- outputs: ``flatten`` (a model output's tensors by name) and ``to_cpu``;
- per-module probes: ``probe_modules`` (the first floating output of every module, in execution order),
  what the parity rule localises a divergence with (torchferry.harness.parity.localise);
- generation: ``static_cache`` (whether a model takes ``cache_implementation="static"``);
- the out-of-memory rule: ``is_oom`` and ``is_host_oom`` (this host's memory or the target's own), and
  ``is_compile_error`` (a failure inside Dynamo or Inductor); the failure-to-slug rule itself is
  ``torchferry.errors.kind_of``, applied by ``torchferry.harness.worker.run_case``;
- the typed capture of one worker (``Capture``: a run, a probe, the float64 golden run on the
  reference, the eval outputs on the target) that the parent loads with ``weights_only=True``:
  plain containers of tensors on disk, dataclasses on either side.

Nothing here imports a command (import-linter's harness-not-commands contract).
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def floating(x: Any) -> bool:
    """Whether ``x`` is a floating-point tensor (what the parity rule compares)."""
    return hasattr(x, "is_floating_point") and x.is_floating_point()


def flatten(output: Any, prefix: str = "") -> dict:
    """The tensors of a model output, by name: ModelOutput/dict keys, tuple indices, or `output`."""
    import torch

    if isinstance(output, torch.Tensor):
        return {prefix or "output": output}
    items = output.items() if hasattr(output, "items") else enumerate(output) if isinstance(output, (tuple, list)) else []
    found = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (tuple, list, dict)) and not prefix:
            found.update(flatten(value, name))
    return found


def to_cpu(tensors: dict) -> dict:
    """Detached CPU copies (never views of device memory): what a capture holds."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def moved(inputs: Any, device: Any = None, dtype: Any = None) -> Any:
    """``inputs`` (a tensor, or dicts, tuples and lists of them) on ``device`` (None: where they are), floating
    tensors cast to ``dtype`` when given (the float64 golden run); anything else as it is."""
    import torch

    if isinstance(inputs, torch.Tensor):
        if dtype is not None and inputs.is_floating_point():
            return inputs.to(device, dtype) if device is not None else inputs.to(dtype)
        return inputs.to(device) if device is not None else inputs
    if isinstance(inputs, dict):
        return {k: moved(v, device, dtype) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(moved(v, device, dtype) for v in inputs)
    return inputs


def fresh(pristine: Any, device: Any, *, inference: bool, fp64: bool = False) -> Any:
    """A copy of the pristine model on ``device``; in eval mode for inference, as users run it; float64 for the
    golden run. The pristine model is never moved: every run starts from the same weights."""
    import torch

    model = copy.deepcopy(pristine).to(device)
    if inference:
        model.eval()
    return model.to(torch.float64) if fp64 else model


def static_cache(model: Any) -> bool:
    """Whether transformers lets ``model.generate`` use a static cache (no dynamic shapes per token)."""
    return bool(getattr(model, "_can_compile_fullgraph", False))


def probe_modules(model: Any, forward: Callable[[Any], Any]) -> tuple[Any, dict]:
    """``forward(model)``'s output and every module's first floating output (on the CPU), in execution order."""
    modules: dict[str, Any] = {}

    def hook(name: str) -> Callable:
        def capture(_module: Any, _inputs: Any, output: Any) -> None:
            tensors = [t for t in flatten(output).values() if floating(t)]
            if tensors and name not in modules:
                modules[name] = tensors[0].detach().to("cpu", copy=True)

        return capture

    handles = [m.register_forward_hook(hook(n or "<model>")) for n, m in model.named_modules()]
    try:
        output = forward(model)
    finally:
        for h in handles:
            h.remove()
    return output, modules


# -- the out-of-memory rule --------------------------------------------------------------------
def is_oom(exc: BaseException) -> bool:
    """Memory ran out: Python's, torch's, or the CPU allocator's (a RuntimeError under an address-space limit)."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def is_host_oom(exc: BaseException) -> bool:
    """The host ran out (the address-space limit, or the CPU allocator), not the target's own capacity: the
    device raises ``torch.OutOfMemoryError`` naming itself for that (device/csrc/Allocator.cpp ``charge``)."""
    import torch

    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return "can't allocate memory" in text or not isinstance(exc, torch.OutOfMemoryError)


def is_compile_error(exc: BaseException) -> bool:
    """A failure raised by torch.compile's machinery (Dynamo, AOT autograd, Inductor), not by the model."""
    import torch._dynamo.exc as dexc

    if isinstance(exc, dexc.TorchDynamoException):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return any(("torch/_dynamo" in f.filename or "torch/_inductor" in f.filename) for f in frames)


# -- the typed capture ---------------------------------------------------------------------------
@dataclass
class RunCapture:
    """One run of every step: the losses (train), the step times, the first step's gradients (train) and the
    first call's tokens (generate)."""

    losses: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    grads: dict[str, Any] = field(default_factory=dict)
    tokens: Any = None


@dataclass
class ProbeCapture:
    """One hooked forward: the model's floating outputs and each module's first floating output."""

    outputs: dict[str, Any]
    modules: dict[str, Any]


@dataclass
class Capture:
    """What one worker hands its parent: the timed run and its probe; the float64 golden capture on the
    reference; the trained model's eval-batch outputs on the target (what the exit formats must reproduce)."""

    run: RunCapture
    probe: ProbeCapture
    golden: Capture | None = None
    eval_outputs: dict[str, Any] | None = None

    def to_payload(self) -> dict:
        """Plain dicts, lists and tensors only: what ``torch.load(weights_only=True)`` accepts."""
        payload: dict[str, Any] = {"run": vars(self.run).copy(), "probe": vars(self.probe).copy()}
        if self.golden is not None:
            payload["golden"] = self.golden.to_payload()
        if self.eval_outputs is not None:
            payload["eval_outputs"] = self.eval_outputs
        return payload

    @classmethod
    def from_payload(cls, payload: dict) -> Capture:
        golden = payload.get("golden")
        return cls(run=RunCapture(**payload["run"]), probe=ProbeCapture(**payload["probe"]),
                   golden=cls.from_payload(golden) if golden is not None else None,
                   eval_outputs=payload.get("eval_outputs"))

    def save(self, path: str | Path) -> None:
        import torch

        torch.save(self.to_payload(), path)

    @classmethod
    def load(cls, path: str | Path) -> Capture:
        """A worker's capture, loaded without unpickling code."""
        import torch

        return cls.from_payload(torch.load(path, weights_only=True))
