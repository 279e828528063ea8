"""One random stream on both sides of a check, on any accelerator: random draws made on the host, moved to the device.

A check compares the same computation on two devices, and a model that draws random numbers
(dropout, noise, sampling) computes another thing when the two sides draw other numbers: every
accelerator has a generator of its own, so even the same seed gives another stream than the CPU's.
torchferry's built-in device draws from the CPU's own generator in a check (``TORCHFERRY_RNG=host``,
one mechanism inside the device, every op included). On any other accelerator (CUDA, a real
Trainium) ``draw_on_host`` makes the random functions a script or model calls draw on the host
generator, in the order the CPU run draws, and moves the numbers to the device:

- the factories (``torch.rand``, ``randn``, ``randint``, ``randperm``, their ``_like`` forms,
  ``normal``, ``bernoulli``, ``multinomial``, ``poisson``) given a device;
- the in-place methods (``Tensor.normal_``, ``uniform_``, ``bernoulli_``, ``random_``,
  ``exponential_``, ``geometric_``, ``log_normal_``, ``cauchy_``: what ``torch.nn.init`` calls);
- ``torch.nn.functional.dropout`` (and so ``nn.Dropout``), with the CPU's own algorithm (a Bernoulli
  mask of the input's shape, divided by ``1 - p``), so that the masks are the CPU run's bit for bit.

A call given its own ``generator`` is left alone (the script chose that stream). Draws made inside
fused kernels (``scaled_dot_product_attention``'s ``dropout_p``, ``rrelu``) are not reached; the
report says so. The host draws cost a copy per call: the target's times then include them, and
``--device-rng`` turns this off to time (and see) the device's own stream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

FACTORIES = ("rand", "randn", "randint", "randperm")
LIKE = ("rand_like", "randn_like", "randint_like")
FROM_INPUT = ("bernoulli", "multinomial", "poisson", "normal")
IN_PLACE = ("normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_", "log_normal_", "cauchy_")
NOT_REACHED = ("random draws inside fused kernels (scaled_dot_product_attention's dropout_p, rrelu) are the device's "
               "own")

_installed = False


def _off_host(device: Any) -> bool:
    import torch

    return device is not None and torch.device(device).type != "cpu"


def _to_host(value: Any) -> Any:
    import torch

    return value.cpu() if isinstance(value, torch.Tensor) else value


def draw_on_host() -> None:
    """Make torch's random functions draw on the host generator for tensors off the host (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch
    import torch.nn.functional as F

    for name in FACTORIES:
        setattr(torch, name, _factory(getattr(torch, name)))
    for name in LIKE:
        setattr(torch, name, _like(getattr(torch, name)))
    for name in FROM_INPUT:
        setattr(torch, name, _from_input(getattr(torch, name)))
    for name in IN_PLACE:
        setattr(torch.Tensor, name, _in_place(getattr(torch.Tensor, name)))
    F.dropout = _dropout(F.dropout)


def _factory(original: Callable) -> Callable:
    @functools.wraps(original)
    def draw(*args: Any, **kwargs: Any) -> Any:
        import torch

        device = kwargs.get("device") or (torch.get_default_device() if kwargs.get("out") is None else None)
        if kwargs.get("generator") is not None or not _off_host(device):
            return original(*args, **kwargs)
        grad = kwargs.pop("requires_grad", False)
        result = original(*args, **{**kwargs, "device": "cpu"}).to(device)
        return result.requires_grad_(grad) if grad else result

    return draw


def _like(original: Callable) -> Callable:
    @functools.wraps(original)
    def draw(input: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        device = kwargs.get("device") or input.device
        if kwargs.get("generator") is not None or not _off_host(device):
            return original(input, *args, **kwargs)
        template = torch.empty(input.shape, dtype=kwargs.pop("dtype", None) or input.dtype)
        return original(template, *args, **{k: v for k, v in kwargs.items() if k != "device"}).to(device)

    return draw


def _from_input(original: Callable) -> Callable:
    @functools.wraps(original)
    def draw(*args: Any, **kwargs: Any) -> Any:
        import torch

        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else kwargs.get("device")
        if kwargs.get("generator") is not None or not _off_host(device) or kwargs.get("out") is not None:
            return original(*args, **kwargs)
        args = tuple(_to_host(a) for a in args)
        kwargs = {k: _to_host(v) for k, v in kwargs.items() if k != "device"}
        return original(*args, **kwargs).to(device)

    return draw


def _in_place(original: Callable) -> Callable:
    @functools.wraps(original)
    def draw(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        if kwargs.get("generator") is not None or not _off_host(self.device):
            return original(self, *args, **kwargs)
        drawn = original(torch.empty_like(self, device="cpu"), *(_to_host(a) for a in args),
                         **{k: _to_host(v) for k, v in kwargs.items()})
        with torch.no_grad():
            self.copy_(drawn)
        return self

    return draw


def _dropout(original: Callable) -> Callable:
    @functools.wraps(original)
    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        import torch

        if not training or p == 0 or not _off_host(input.device):
            return original(input, p, training, inplace)
        if p == 1:
            return input.mul_(0) if inplace else input * 0
        noise = torch.empty_like(input, device="cpu").bernoulli_(1 - p)  # the CPU's dropout (ATen's _dropout_impl)
        noise.div_(1 - p)
        noise = noise.to(input.device)
        return input.mul_(noise) if inplace else input * noise

    return dropout
