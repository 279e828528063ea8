"""Fixtures of the Hugging Face stack tests on the built-in device.

`neuron` enables the device (and so the `torch_neuronx` stand-in) in this process and
gives each test fresh library state: accelerate and transformers cache their "is Neuron
here?" answers (`lru_cache`) and accelerate keeps one `AcceleratorState` per process.
`run_python` runs a snippet in a fresh interpreter (several devices, `torchrun`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
import torch

def _reset_library_state() -> None:
    from accelerate.state import AcceleratorState
    from accelerate.utils import imports as accelerate_imports
    from transformers.utils import import_utils

    accelerate_imports.is_neuron_available.cache_clear()
    import_utils.is_torch_neuron_available.cache_clear()
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def neuron():
    import torchferry.device

    torchferry.device.enable()
    _reset_library_state()
    yield torch.neuron
    _reset_library_state()


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_python():
    def run(code: str, env: dict[str, str] | None = None, timeout: float = 240,
            argv: list[str] | None = None) -> Completed:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHFERRY_", "NEURON_RT_"))}
        environ.update(env or {})
        command = argv or [sys.executable, "-c", textwrap.dedent(code)]
        proc = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=timeout)
        return Completed(proc.returncode, proc.stdout, proc.stderr)

    return run
