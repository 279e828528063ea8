"""Per-device RNG over the neuron generators: TorchNeuron's `torch.neuron` names (torch_neuronx/neuron.py),
which has no `get_rng_state_all`/`set_rng_state_all`."""

from __future__ import annotations

from typing import Any

import torch

from torchferry.device import _runtime
from torchferry.device.neuron._devices import _index, device_count


def _generator(device: Any = None) -> torch.Generator:
    return _runtime.core()._default_generator(_index(device))


def _all() -> list[torch.Generator]:
    return [_runtime.core()._default_generator(i) for i in range(device_count())]


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in _all():
        generator.manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    value = _generator().seed()
    for generator in _all():
        generator.manual_seed(value)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    """The RNG state of `device` (None: the current device)."""
    return _generator(device).get_state()


def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
    """Set the RNG state of `device` (None: the current device)."""
    _generator(device).set_state(state.cpu())
