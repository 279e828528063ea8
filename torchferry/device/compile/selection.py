"""`torch.compile(model)` with no backend picks `neuron` for graphs on the device.

AWS's torch.compile reference for TorchNeuron (2.33) says of `backend`: "'neuron'.
Explicitly set, or auto-selected when running on a Neuron device." The source snapshot
(parmoham-aws/test-repo-parmoham 98154b8) only registers the backend by name, through the
`torch_dynamo_backends` entry point in its pyproject.toml; it has no selection of its own.

torch 2.13 has no per-device default backend. Its one hook is process-wide:
`torch.compile(backend=None)` (the default) asks
`torch._dynamo.backends.registry.get_default_backend()`, which `set_default_backend()`
sets. Enabling the device sets it, unless the process chose its own default, to `select`:
per Dynamo graph, a graph with `neuron` inputs goes to the `neuron` backend, and every other
graph to Inductor built exactly as `torch.compile(backend="inductor")` builds it (the same
`torch._TorchCompileInductorWrapper` with the same mode and options), so CPU and CUDA
models in the same process compile as before. One difference remains for them: mode and
options are checked at the first compilation instead of at the `torch.compile` call.

Naming Inductor explicitly for a device graph fails with a `UsageError` naming the `neuron`
backend (`RefuseInductor`, registered as Inductor's code generator for the device), where
Inductor would otherwise fail with `KeyError: 'neuron'`: TorchNeuron has no Inductor path.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from torchferry.errors import UsageError

_REGISTRY = "torch._dynamo.backends.registry"
_INDUCTOR_CODEGEN = "torch._inductor.codegen.common"


class InductorOnDeviceError(UsageError):
    """`backend="inductor"` for a graph on `neuron`: TorchNeuron compiles with `neuron` only."""


def _on_device(example_inputs: Sequence[Any]) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "neuron" for x in example_inputs)


def select(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The default backend while the device is enabled: `neuron` for graphs on the device,
    Inductor (as `backend="inductor"` would build it) for every other graph."""
    if _on_device(example_inputs):
        from torchferry.device.compile.backend import neuron_backend

        return neuron_backend(gm, example_inputs, **kwargs)
    inductor = torch._TorchCompileInductorWrapper(kwargs.get("mode"), kwargs.get("options"), None)
    return inductor(gm, example_inputs)


select.__name__ = "neuron_or_inductor"  # how Dynamo's logs and guards name the backend


class RefuseInductor:
    """Inductor's scheduling and wrapper code generator for `neuron`: there is none on
    TorchNeuron, so building one raises (Inductor builds it for the first device graph)."""

    supports_caching = False  # read by Inductor before it builds a code generator

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> RefuseInductor:  # how Inductor builds a wrapper
        return cls()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise InductorOnDeviceError(
            "torch.compile(backend='inductor') got a graph on the 'neuron' device, but TorchNeuron "
            "compiles device graphs with its own backend only (it has no Inductor code generator). "
            "Valid: backend='neuron', or no backend at all (torch.compile(model) picks 'neuron' "
            "for device graphs). Next step: drop backend='inductor' or write backend='neuron'."
        )


def _install_default(registry: ModuleType) -> None:
    """Make `select` the default backend, unless the process chose one of its own."""
    if registry.get_default_backend() == "inductor":
        registry.set_default_backend(select)


def _install_refusal(codegen: ModuleType) -> None:
    """Inductor's per-device registries get `neuron` entries that refuse (with no entry,
    Inductor fails with `KeyError: 'neuron'`); no other device's entries change."""
    if codegen.get_scheduling_for_device("neuron") is None:
        codegen.register_backend_for_device("neuron", RefuseInductor, RefuseInductor)
        codegen.register_device_op_overrides("neuron", codegen.DeviceOpOverrides())


_ACTIONS: dict[str, Callable[[ModuleType], None]] = {
    _REGISTRY: _install_default,
    _INDUCTOR_CODEGEN: _install_refusal,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs each module's action right after it is first imported, so that enabling the
    device imports neither Dynamo nor Inductor (seconds) in processes that never compile."""

    def __init__(self) -> None:
        self.pending = dict(_ACTIONS)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        action = self.pending.pop(fullname, None)
        if action is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ActingLoader(spec.loader, action)
        return spec


class _ActingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, action: Callable[[ModuleType], None]) -> None:
        self._loader, self._action = loader, action

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._action(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... of the real loader
        return getattr(self._loader, name)


def register() -> None:
    """Auto-select `neuron` for device graphs from now on (idempotent; imports nothing)."""
    if any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        return
    finder = _AfterImport()
    for name in list(finder.pending):
        if name in sys.modules:
            finder.pending.pop(name)(sys.modules[name])
    if finder.pending:
        sys.meta_path.insert(0, finder)
