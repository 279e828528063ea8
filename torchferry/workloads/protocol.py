"""The workload protocol and its loader.

A workload is a ``build(**options)`` callable. torchferry passes the options it accepts
among ``size``, ``batch_size``, ``seq_len`` and ``mode`` and expects back a dict (or an
object with these attributes, or a ``(model, batch[, loss])`` tuple):

- ``model``: a ``torch.nn.Module`` built on the CPU;
- ``batch(device, seed)``: a batch (dict of tensors, tuple, or tensor) on ``device``; the
  same seed must give the same values on every device (draw on the CPU, then ``.to``);
- ``loss(output, batch)`` (optional): the training loss; default ``output.loss``;
- ``inputs(batch)`` (optional): positional arguments for the model; default ``model(**batch)``
  for a dict, ``model(*batch)`` for a tuple, ``model(batch)`` for a tensor;
- ``generates`` (optional, default: the model has ``generate``): whether generation mode applies.

Specs: a built-in name (``llama``), ``path/to/file.py:build`` or ``package.module:build``, or a
model named as torchferry.workloads.model_source names one (a transformers model type, a config.json
or a folder holding one, a Hub id ``org/name[@revision]``), built by torchferry.workloads.hub.
A relative file path is resolved against the caller's working directory once, in the
parent (``resolve_source``); workers load the resolved source and never re-resolve the spec.
Imports in the workload resolve as they would for ``python path/to/file.py`` run from the
caller's folder: the source records the file's own folder and the caller's working folder
(``paths``), and every process that builds the workload puts them first on ``sys.path``, so
``from train import Net`` beside the adapter works in workers that run elsewhere.

``mode`` keeps the protocol's names (``training``, ``inference``, ``generation``): user
``build()`` functions compare against them. The harness's own names (torchferry.harness.modes)
are translated here.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchferry.errors import (
    DeviceOutOfMemoryError,
    FerryError,
    MissingDependencyError,
    UsageError,
    WorkloadError,
    kind_of,
)
from torchferry.workloads import BUILTIN

OPTION_NAMES = ("size", "batch_size", "seq_len", "mode")
# what a Python file given as a model should have been (torchferry.workloads.model_source.refuse_slips)
PYTHON_FILE = ("for a workload, give the function that builds it, '{file}:build' (it returns the model and its batches: "
               "torchferry/workloads/protocol.py); to check a training script unchanged, run "
               "`ferry check -- python {file}`.")
# the harness's mode names -> the names build() receives (the protocol's, unchanged since version 1)
PROTOCOL_MODE = {"train": "training", "forward": "inference", "generate": "generation"}


@dataclass
class Workload:
    """A loaded workload, normalised from whatever shape ``build`` returned."""

    spec: str
    model: Any
    batch: Callable[[Any, int], Any]
    loss: Callable[[Any, Any], Any] | None
    inputs: Callable[[Any], tuple] | None
    generates: bool
    source: dict  # how a fresh process rebuilds the architecture: {"kind": "file"|"module", ...}

    def forward(self, model: Any, batch: Any) -> Any:
        """Call ``model`` on ``batch`` following the protocol's calling convention."""
        if self.inputs is not None:
            return model(*self.inputs(batch))
        if isinstance(batch, dict):
            return model(**batch)
        if isinstance(batch, (tuple, list)):
            return model(*batch)
        return model(batch)

    def loss_of(self, output: Any, batch: Any) -> Any:
        """The training loss: the workload's own function, else the model output's ``loss``."""
        if self.loss is not None:
            return self.loss(output, batch)
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is None:
            raise UsageError(
                f"workload {self.spec!r} gives no loss: its model output has no `loss` and build() returned no "
                "`loss(output, batch)`. Return a loss function from build(), or use --mode inference."
            )
        return loss


def resolve_source(spec: str, cwd: Path | None = None, trust_remote_code: bool = False, weights: bool = False) -> dict:
    """Where ``spec``'s build function lives, without importing it; a relative path is taken from ``cwd``.

    A named model's config is read (a Hub id's fetched) here, once; its remote code is refused unless trusted, and
    ``weights`` without a checkpoint to load them from is refused."""
    if weights and (spec in BUILTIN or ":" in spec):
        raise UsageError(f"--weights loads a checkpoint's weights; workload {spec!r} builds its own model. Pass a Hub id "
                         "or a checkpoint folder with --weights, or leave --weights off.")
    if spec in BUILTIN:
        return {"kind": "module", "module": f"torchferry.workloads.{spec}", "attr": "build"}
    cwd = (cwd or Path.cwd()).resolve()
    target, sep, attr = spec.rpartition(":")
    if not (sep and target.endswith(".py")):  # FILE.py:build is the file form; a bare FILE.py or hf:org/name a slip
        from torchferry.workloads.model_source import refuse_slips

        refuse_slips(spec, PYTHON_FILE)
    if not sep or not target or not attr:
        return _model_source(spec, cwd or Path.cwd(), trust_remote_code, weights)
    if not all(part.isidentifier() for part in attr.split(".")):
        raise UsageError(f"workload {spec!r}: {attr!r} after the ':' is not the name of a function. Give "
                         "'path/to/file.py:build' or 'package.module:build' (the function that returns the model and "
                         f"its batches), or a model: a config.json, a model type or a Hub id (org/name).")
    if target.endswith(".py"):
        path = Path(target).expanduser()
        path = (path if path.is_absolute() else cwd / path).resolve()
        if not path.is_file():
            raise UsageError(f"workload file {target!r} does not exist (from {spec!r}); check the path.")
        return {"kind": "file", "path": str(path), "attr": attr, "paths": _unique([str(path.parent), str(cwd)])}
    return {"kind": "module", "module": target, "attr": attr, "paths": [str(cwd)]}


def _unique(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def _on_import_path(paths: list[str]) -> None:
    """Put the workload's folders first on ``sys.path``, as Python puts a script's folder (kept once)."""
    for folder in reversed(paths):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def _local_module(name: str, paths: list[str]) -> Path | None:
    """The file or package named ``name`` (its top-level part) in one of the workload's folders, if there is one."""
    top = name.split(".")[0]
    for folder in paths:
        for candidate in (Path(folder) / f"{top}.py", Path(folder) / top / "__init__.py", Path(folder) / top):
            if candidate.exists():
                return candidate
    return None


def missing_module_error(spec: str, name: str | None, paths: list[str]) -> FerryError:
    """A workload import that failed on ``name``: "install it" only when no such module is beside the workload."""
    local = _local_module(name, paths) if name else None
    if local is not None:
        return UsageError(
            f"workload {spec!r} imports {name!r}, which is {local} beside it, but that import failed: {name!r} "
            "is not a module there (check the spelling of the name it imports)."
        )
    return MissingDependencyError(
        f"workload {spec!r} needs the module {name!r}, which is not installed and is no file beside the workload "
        f"(looked in {', '.join(paths) or 'the import path'}). Install it (pip install {name}) or choose another "
        "workload."
    )


def _model_source(spec: str, cwd: Path, trust_remote_code: bool, weights: bool) -> dict:
    """A named model's build: torchferry.workloads.hub with the resolved source bound to it."""
    from torchferry.workloads import model_source

    try:
        source = model_source.resolve(spec, cwd, builtins=BUILTIN)
    except UsageError as exc:
        if "none of the forms" not in str(exc):
            raise
        raise UsageError(f"unknown workload {spec!r}. Valid: a built-in ({', '.join(BUILTIN)}), 'path/to/file.py:build', "
                         f"'package.module:build', or a model: {model_source.FORMS}.") from None
    source.refuse_untrusted(trust_remote_code)
    if weights and source.kind != "hub" and not (source.kind == "config" and Path(source.config_path).name == "config.json"):
        raise UsageError(f"--weights: {spec!r} names no weights (a model type or a bare config file). Pass a Hub id or a "
                         "checkpoint folder with --weights, or leave --weights off for random weights.")
    return {"kind": "module", "module": "torchferry.workloads.hub", "attr": "build", "model": source.name,
            "bind": {"model_source": source.to_dict(), "trust_remote_code": trust_remote_code, "weights": weights}}


def import_build(source: dict) -> Callable[..., Any]:
    """Import the build function named by ``source`` (a user import error is reported as theirs)."""
    _on_import_path(source.get("paths", []))
    try:
        if source["kind"] == "file":
            name = f"_ferry_workload_{abs(hash(source['path']))}"
            module_spec = importlib.util.spec_from_file_location(name, source["path"])
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(source["module"])
    except ModuleNotFoundError as exc:
        where = source.get("path") or source.get("module")
        if exc.name and where and exc.name == source.get("module"):
            raise UsageError(f"workload module {where!r} cannot be imported: no module named {exc.name!r}.") from exc
        raise missing_module_error(str(where), exc.name, source.get("paths", [])) from exc
    except Exception as exc:
        raise WorkloadError(
            f"importing workload {source.get('path') or source.get('module')!r} raised {type(exc).__name__}: {exc}",
            traceback.format_exc(),
        ) from exc
    build = getattr(module, source["attr"], None)
    if not callable(build):
        raise UsageError(
            f"workload {source.get('path') or source.get('module')!r} has no callable {source['attr']!r}; "
            "define `def build(**options)` returning model, batch and optional loss."
        )
    return functools.partial(build, **source["bind"]) if source.get("bind") else build


def load_workload(spec: str, options: dict, source: dict | None = None) -> Workload:
    """Build the workload named by ``spec`` (at ``source`` when already resolved) with the options its ``build`` accepts."""
    source = source or resolve_source(spec)
    build = import_build(source)
    if options.get("mode") is not None:
        options = {**options, "mode": PROTOCOL_MODE.get(str(options["mode"]), str(options["mode"]))}
    accepted = inspect.signature(build).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    kwargs = {k: v for k, v in options.items() if k in OPTION_NAMES and v is not None and (takes_all or k in accepted)}
    try:
        built = build(**kwargs)
    except ModuleNotFoundError as exc:
        raise missing_module_error(spec, exc.name, source.get("paths", [])) from exc
    except (UsageError, MissingDependencyError):
        raise
    except Exception as exc:
        if _out_of_memory(exc):  # the host's memory, not the workload's code: exit 6 with the fix, no traceback
            raise DeviceOutOfMemoryError(
                f"workload {spec!r}: building its model ran out of this host's memory ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'}). Build a smaller model (--size, "
                "--batch-size, a smaller config), or size the full-scale job without building it with ferry plan.") from exc
        raise WorkloadError(f"workload {spec!r}: build() raised {type(exc).__name__}: {exc}", traceback.format_exc()) from exc
    source = {**source, "options": kwargs}
    return _normalise(spec, built, source)


def _out_of_memory(exc: BaseException) -> bool:
    """A failed allocation: what ``kind_of`` calls out-of-memory, or the CPU allocator's RuntimeError (DefaultCPUAllocator:
    can't allocate memory)."""
    return kind_of(exc) == DeviceOutOfMemoryError.slug or "can't allocate memory" in str(exc)


def _normalise(spec: str, built: Any, source: dict) -> Workload:
    if isinstance(built, (tuple, list)):
        if len(built) not in (2, 3):
            raise UsageError(f"workload {spec!r}: build() returned a {len(built)}-tuple; expected (model, batch[, loss]).")
        built = dict(zip(("model", "batch", "loss"), built))
    get = built.get if isinstance(built, dict) else (lambda key, default=None: getattr(built, key, default))
    model, batch = get("model"), get("batch")
    if model is None or not callable(batch):
        raise UsageError(
            f"workload {spec!r}: build() must return `model` and a callable `batch(device, seed)` "
            f"(got {type(built).__name__})."
        )
    generates = get("generates")
    return Workload(
        spec=spec,
        model=model,
        batch=batch,
        loss=get("loss"),
        inputs=get("inputs"),
        generates=hasattr(model, "generate") if generates is None else bool(generates),
        source=source,
    )
