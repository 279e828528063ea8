"""Per-device RNG: `torch.cuda.random`'s functions over the neuron generators."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from torchferry.device import _runtime


def _generator(device: Any = None) -> torch.Generator:
    from torchferry.device.neuron import _index

    return _runtime.core()._default_generator(_index(device))


def _all() -> list[torch.Generator]:
    from torchferry.device.neuron import device_count

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


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    _generator(device).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in _all()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for generator, state in zip(_all(), new_states, strict=True):
        generator.set_state(state.cpu())
