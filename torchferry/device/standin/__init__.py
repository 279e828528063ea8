"""The `torch_neuronx` stand-in: makes `import torch_neuronx` find the built-in device.

Hugging Face libraries decide that Neuron is present by
`importlib.util.find_spec("torch_neuronx")` and then `torch.neuron.is_available()`
(accelerate `utils/imports.py` `is_neuron_available`, transformers
`utils/import_utils.py` `is_torch_neuron_available`); only then do they take their
Neuron paths (device `neuron`, `DistributedType.MULTI_NEURON`, process-group backend
`neuron`, `torch_compile_backend="neuron"`, Neuron RNG state in checkpoints). Without
a `torch_neuronx` they train on the CPU without a word.

`install()` (called by `torchferry.device.enable()`) appends a meta-path finder that
answers for the top-level name `torch_neuronx` only, with the module in
`torch_neuronx.py` beside this file. It is never a distribution: it has no metadata,
sits after the path finders (a real torch-neuronx on `sys.path` always wins), and is
gone in any process that did not enable the device. `TORCHFERRY_STANDIN=0` keeps it off.
`profiling.py` is its `NeuronProfiler` over the built-in device.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULE_NAME = "torch_neuronx"
MODULE_FILE = Path(__file__).with_name("torch_neuronx.py")


class StandinFinder(importlib.abc.MetaPathFinder):
    """Finds torchferry's stand-in for `torch_neuronx` and nothing else."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE_NAME:
            return None
        return importlib.util.spec_from_file_location(MODULE_NAME, MODULE_FILE)


def _finder() -> StandinFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, StandinFinder)), None)


def is_installed() -> bool:
    """Whether this process's `import torch_neuronx` would find the stand-in."""
    return _finder() is not None


def install() -> None:
    """Make `import torch_neuronx` find the stand-in (idempotent). The device must be enabled."""
    if _finder() is None:
        sys.meta_path.append(StandinFinder())


__all__ = ["MODULE_NAME", "StandinFinder", "install", "is_installed"]
