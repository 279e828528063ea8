"""Fixtures of the built-in device tests.

`neuron` enables the device in this process (once; enabling is idempotent).
`rules` switches the device profile's [rules] for one test.
`fallback_mode` sets TORCHFERRY_FALLBACK's mode for one test, with no op warned about yet.
`run_python` runs a snippet in a fresh interpreter, for behaviour fixed at start-up
(environment variables, registration conflicts, autoload, out-of-memory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import dataclasses
from dataclasses import dataclass

import pytest


@pytest.fixture(scope="session")
def neuron():
    import torchferry.device

    torchferry.device.enable()
    import torch

    return torch.neuron


@pytest.fixture
def numerics(neuron):
    """Switch the device's numerics ("target" or "host") for one test; back to the default after."""
    from torchferry.device import _runtime, target

    def set_numerics(mode: str) -> None:
        target.configure(_runtime.core(), _runtime.profile(), "silent", mode)

    yield set_numerics
    target.configure(_runtime.core(), _runtime.profile(), "warn", "target")


@pytest.fixture
def fallback_mode(neuron):
    """Set the host-fallback mode ("warn", "silent", "error") for one test. Setting it forgets
    which ops have warned already: the device warns once per op per process, so a test that
    expects a fallback warning must not depend on whether an earlier test in its worker ran
    the op first. Back to "warn" after."""
    from torchferry.device import _runtime

    yield _runtime.set_fallback_mode
    _runtime.set_fallback_mode("warn")


@pytest.fixture
def rules(neuron):
    """Switch the profile's rules for one test (`rules(memory_format=False)`); back after."""
    from torchferry.device import _runtime, target

    def set_rules(**changes: bool) -> None:
        profile = _runtime.profile()
        target.configure(_runtime.core(), dataclasses.replace(profile, rules={**profile.rules, **changes}), "silent")

    yield set_rules
    target.configure(_runtime.core(), _runtime.profile(), "warn")


@pytest.fixture
def compile_env(neuron, tmp_path, monkeypatch):
    """A clean Dynamo state, metrics from zero and private compile caches (torchferry's and
    Inductor's own, for graphs that compile on the CPU)."""
    import torch

    monkeypatch.setenv("TORCHFERRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    neuron.reset_dynamo_metrics()
    yield neuron
    torch._dynamo.reset()


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str


def _run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> Completed:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHFERRY_", "NEURON_RT_"))}
    environ.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=environ, timeout=timeout,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def run_python():
    return _run_python
