"""The built-in `neuron` device: a PrivateUse1 backend whose memory is host memory
and whose kernels are the CPU's, with TorchNeuron's user-visible contract.

Nothing happens at import. `enable()` (or `TORCHFERRY_DEVICE=neuron`, through
PyTorch's `torch.backends` autoload entry point) loads the C++ core, names
PrivateUse1 `neuron` and creates `torch.neuron`. It stands aside when the real
torch-neuronx is installed, and refuses to register over another backend.

Package map: ``csrc/`` (the C++ core, one file per PyTorch interface) and ``_runtime`` (its handle);
``_settings`` (the environment knobs, read once); ``profile`` (the device profiles' data model) and
``target`` (what the target does with each op, and the accounting TorchNeuron's API lacks);
``neuron`` (becomes ``torch.neuron``); ``compile`` (the ``neuron`` torch.compile backend);
``distributed`` (the ``neuron`` process-group backend) and ``distributed_rules`` (what TorchNeuron's group refuses);
``standin`` (the ``torch_neuronx`` stand-in).
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from torchferry.device.target import (
    EagerCompiles,
    eager_compiles,
    executed_op_count,
    fallback_reasons,
    fallback_summary,
    forget_eager_signatures,
    host_syncs,
    known_issues,
    numerics,
    uncounted,
)
from torchferry.device._settings import parse_bytes
from torchferry.errors import DeviceConflictError, UsageError

DEVICE_NAME = "neuron"

_lock = threading.Lock()
_enabled = False


def is_enabled() -> bool:
    """Whether this process has registered the built-in device."""
    return _enabled


def real_neuron_installed() -> bool:
    """Whether AWS's torch-neuronx (the real TorchNeuron) is installed here.

    Asks the distribution metadata (an installed wheel) and the path finders (a source
    checkout on sys.path), never `find_spec`, which torchferry's own `torch_neuronx`
    stand-in answers once the built-in device is enabled.
    """
    try:
        importlib.metadata.distribution("torch-neuronx")
        return True
    except importlib.metadata.PackageNotFoundError:
        return importlib.machinery.PathFinder.find_spec("torch_neuronx") is not None


def enable(profile: str | Path | None = None) -> None:
    """Register the built-in `neuron` device in this process (idempotent).

    `profile` names a shipped device profile (`trn2`) or a TOML file; it sets the
    device memory and the ops that run on the host. Raises DeviceConflictError when
    PrivateUse1 is already held by another backend.
    """
    global _enabled
    with _lock:
        if _enabled:
            return
        import torch

        holder = torch._C._get_privateuse1_backend_name()
        if holder != "privateuseone":
            module = getattr(torch, holder, None)
            owner = getattr(module, "__name__", "an unknown module") if module else "an unknown module"
            raise DeviceConflictError(
                f"cannot register torchferry's built-in '{DEVICE_NAME}' device: PrivateUse1 is "
                f"already held by the '{holder}' backend (torch.{holder} is {owner}). A process has "
                f"one PrivateUse1 backend. Use the real device instead (e.g. --target {holder} or "
                f"model.to('{holder}')), or run the rehearsal in a process that does not import it."
            )
        if real_neuron_installed():
            raise DeviceConflictError(
                "torch-neuronx (the real TorchNeuron) is installed in this environment, so "
                "torchferry's built-in 'neuron' device stands aside: use the real device "
                "(`import torch_neuronx`; model.to('neuron')). To rehearse on the host anyway, "
                "use an environment without torch-neuronx."
            )
        from torchferry.device import _runtime, _settings, standin

        use_standin = _settings.standin_enabled(os.environ)
        _runtime.start(profile)
        _register_with_torch(torch)
        _enabled = True
        if use_standin:
            standin.install()  # `import torch_neuronx` now finds the stand-in (HF libraries' test)


def compile_metrics() -> dict[str, Any]:
    """This rank's `torch.compile(backend="neuron")` compilations on the built-in device since the
    last `torch.neuron.reset_dynamo_metrics()`: ``{"rank", "graphs", "graph_breaks", "recompiles"}``.

    The torchferry view the harness and the rehearsal read. `torch.neuron.get_dynamo_metrics()`
    keeps TorchNeuron's contract (a list of `NeuronCompilationMetrics`); this adds, per graph, the
    cache outcome (``cache``: hit, miss, bypass, disabled), ``cache_key``, ``input_signature``,
    ``kind`` (forward, backward, inference) and Dynamo's ``compile_id`` (``"<frame>/<n>"``), plus
    Dynamo's graph-break reasons with counts and the recompilations of a frame after its first.
    See docs/device/compile.md. Works only once the device is enabled."""
    from torchferry.device.compile.metrics import compile_metrics as metrics

    return metrics()


def _register_with_torch(torch: ModuleType) -> None:
    """The wiring, once the core is started: name PrivateUse1 `neuron`, create `torch.neuron`
    and the tensor/module methods, register the compile and process-group backends."""
    import torch.utils.backend_registration as registration

    from torchferry.device import compile as compile_backend
    from torchferry.device import distributed, neuron

    registration.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, neuron)
    registration.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    compile_backend.register()
    distributed.register()


def _autoload() -> None:
    """`torch.backends` entry point: enable the device when TORCHFERRY_DEVICE=neuron.

    PyTorch calls this at the end of `import torch`. Without the variable it does
    nothing, so installing torchferry changes no one's `import torch`. A bad value of any
    device variable (an unknown device name, a malformed size) ends the process with one
    line and exit status 2: PyTorch would wrap the message in its own traceback, ending with
    a hint about autoloading that does not apply.
    """
    from torchferry.device._settings import requested_device

    try:
        if requested_device(os.environ) is None:
            return
        if real_neuron_installed():
            return  # the real torch-neuronx autoloads itself; stand aside
        enable()
    except UsageError as exc:  # a bad variable: one line, not torch's wrapped traceback and its unrelated hint
        sys.stderr.write(f"torchferry: {exc}\n")
        raise SystemExit(2) from None


__all__ = [
    "DEVICE_NAME", "EagerCompiles", "compile_metrics", "eager_compiles", "enable", "executed_op_count",
    "fallback_reasons", "fallback_summary",
    "forget_eager_signatures", "host_syncs", "is_enabled", "known_issues", "numerics", "parse_bytes", "real_neuron_installed",
    "uncounted",
]
