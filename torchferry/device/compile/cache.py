"""The persistent cache of graphs compiled by `torch.compile(backend="neuron")`.

TorchNeuron keeps compiled NEFFs on disk so that a second process skips the compiler; the
built-in device does the same with Inductor's FX graph cache, pointed at a directory of its
own. Inductor's cache key already covers the graph code, the input signature (shapes,
strides, dtypes), Inductor's config and the torch version; the directory adds the torch and
torchferry versions, so an upgrade of either never reads artifacts of the other, and the
numerics (`TORCHFERRY_NUMERICS`), so a graph compiled under one numerics never answers the
other, whichever cache keys it before `numerics.narrow_64bit` rewrites it.

AOTAutograd's own cache stays off for device graphs: a hit there restores Inductor's
compiled graphs itself, without the forward and backward compilers that wrap them to run on
device tensors (`host_graph.DeviceCode`). A warm process therefore traces the joint graph
again and takes each compiled forward and backward graph from the FX graph cache.

Settings (read at each compilation, so tests and the decision test can change them):
``TORCHFERRY_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torchferry`` or ``~/.cache/torchferry``)
and ``TORCHFERRY_DISABLE_COMPILE_CACHE=1``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

CACHE_DIR_ENV = "TORCHFERRY_CACHE_DIR"
DISABLE_ENV = "TORCHFERRY_DISABLE_COMPILE_CACHE"
_INDUCTOR_DIR_ENV = "TORCHINDUCTOR_CACHE_DIR"


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether compiled graphs are looked up in and written to the persistent cache."""
    return environ.get(DISABLE_ENV, "").strip().lower() not in ("1", "true", "yes", "on")


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``TORCHFERRY_CACHE_DIR``, or torchferry's directory under the user cache dir."""
    if environ.get(CACHE_DIR_ENV):
        return Path(environ[CACHE_DIR_ENV]).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchferry"


def versions() -> str:
    """The torch and torchferry versions that partition the cache."""
    import torch

    import torchferry

    return f"torch-{torch.__version__}-torchferry-{torchferry.__version__}"


def compile_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where this torch + torchferry pair keeps its compiled graphs."""
    return cache_root(environ) / "compile" / versions()


def graph_key(code: str, signature: str) -> str:
    """A stable name for a compiled graph: its code, input signature and the versions."""
    return hashlib.sha256(f"{versions()}\n{signature}\n{code}".encode()).hexdigest()[:16]


@contextlib.contextmanager
def scope(environ: Mapping[str, str] = os.environ) -> Iterator[bool]:
    """Compile inside this: Inductor's caches live in torchferry's directory (or are off).

    Yields whether the cache is enabled. The Inductor directory variable is restored on
    exit, so plain `torch.compile` (Inductor) in the same process keeps its own cache.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    on = enabled(environ)
    from torchferry.device import target

    directory = compile_dir(environ) / f"inductor-numerics-{target.numerics()}"
    directory.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get(_INDUCTOR_DIR_ENV)
    os.environ[_INDUCTOR_DIR_ENV] = str(directory)
    try:
        # Inductor's FX graph cache (one entry per forward/backward graph); AOTAutograd's
        # cache off (see the module docstring).
        with inductor_config.patch(fx_graph_cache=on, fx_graph_remote_cache=False), functorch_config.patch(
            enable_autograd_cache=False
        ):
            yield on
    finally:
        if previous is None:
            os.environ.pop(_INDUCTOR_DIR_ENV, None)
        else:
            os.environ[_INDUCTOR_DIR_ENV] = previous
