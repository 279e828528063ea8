"""Recorders installed in every process of an unchanged training script (`ferry check -- COMMAND`).

PyTorch calls every ``torch.backends`` entry point at the end of ``import torch``; torchferry's
second entry point is ``autoload`` here. It does nothing unless ``RECORD_ENV`` names a folder, so
installing torchferry changes no one's ``import torch``. When it is set (by `ferry check` for its
own children only), the process records, without any change to the script:

- the loss of every ``backward()`` on a scalar (kept as the tensor; read once, at the end, so the
  recorder adds no host sync to the steps it measures);
- optimizer steps, from PyTorch's global optimizer hooks: one ``optimizer.step()`` call is a step;
- the gradient norm of each step: the total norm the script's own ``clip_grad_norm_`` returned (taken
  before clipping, and no work of ours), else computed from this rank's local gradients;
- a digest of the last stepped optimizer's parameters when the process ends;
- every checkpoint written (``torch.save``, safetensors, and so ``save_pretrained``), by path;
- the step end times and the peak memory of the device the losses live on;
- on a device that emulates another (``torchferry.harness.devices.emulates``), the rehearsal's
  per-step counts, in the record format check/rehearsal.py judges; the recorder's own ops
  (the gradient norm, the step-end synchronisation) are taken out of those counts.

``STEPS_ENV`` stops the script cleanly (``SystemExit(0)``) after that many steps. ``SEED_ENV``
seeds Python's, NumPy's and torch's RNGs at start; a later ``torch.manual_seed`` from the script
is noted (the report then says the script seeds itself). ``SEED_OFFSET_ENV`` is added to every torch
seed, the script's own included: the reference's second run, whose spread from the first is the
band a target with other random streams is judged in. The record (one JSON file per process,
``record-<pid>.json``) is written atomically at exit, at the ``--steps`` stop, on SIGTERM (the
parent's timeout or Ctrl-C) and after an uncaught exception, whose traceback and user line it keeps.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import importlib.abc
import json
import os
import signal
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torchferry.harness.protocol import T0_ENV

RECORD_ENV = "TORCHFERRY_RECORD"  # folder of the records; unset: the recorders stay off
STEPS_ENV = "TORCHFERRY_RECORD_STEPS"  # stop after this many optimizer steps
SEED_ENV = "TORCHFERRY_RECORD_SEED"  # seed the RNGs at start
SEED_OFFSET_ENV = "TORCHFERRY_RECORD_SEED_OFFSET"  # added to every torch seed (the reference's second run)
PARAMETER_TENSORS_LIMIT = 50_000_000  # final parameters up to this many elements are kept whole (else hashed only)
PLACEMENT_TEXT = "Expected all tensors to be on the same device"

_recorder: ScriptRecorder | None = None


def autoload() -> None:
    """``torch.backends`` entry point: install the recorders when ``RECORD_ENV`` is set, else nothing."""
    global _recorder
    folder = os.environ.get(RECORD_ENV, "").strip()
    if not folder or _recorder is not None:
        return
    steps = os.environ.get(STEPS_ENV, "").strip()
    seed = os.environ.get(SEED_ENV, "").strip()
    _recorder = ScriptRecorder(Path(folder), int(steps) if steps else None, int(seed) if seed else None,
                               int(os.environ.get(SEED_OFFSET_ENV) or 0))
    _recorder.install()


def _library_paths() -> tuple[str, ...]:
    """Folders whose frames are not the user's: the standard library, site-packages and torchferry."""
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.add(str(Path(__file__).resolve().parents[1]))
    return tuple(sorted(p for p in paths if p))


def user_frame(tb: Any) -> traceback.FrameSummary | None:
    """The innermost frame of a traceback that is the user's code (not a library's, not torchferry's)."""
    libraries = _library_paths()
    frames = [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(libraries)
              and not f.filename.startswith("<")]
    return frames[-1] if frames else None


def tensor_digest(t: Any) -> str:
    """sha256 of a tensor's dtype, shape and bytes on the CPU: equal digests mean equal values."""
    import torch

    local = t.to_local() if hasattr(t, "to_local") else t
    cpu = local.detach().to("cpu").contiguous().reshape(-1)
    h = hashlib.sha256(f"{cpu.dtype}{list(local.shape)}".encode())
    if cpu.numel():
        h.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.dtype != torch.bool else cpu.numpy().tobytes())
    return h.hexdigest()


GRAPH_NODES_LIMIT = 20_000  # nodes of the first backward's graph read for its tensor shapes


def graph_shapes(loss: Any) -> list[list]:
    """The shapes of the tensors the first backward's autograd graph saved, as ``[node, attribute, shape]``
    sorted: what the step computed on, read once and only from metadata (no device work). Two runs of one
    script whose lists differ computed on other shapes: a library chose them per device (TRL pads batches to
    a multiple of 128 on ``neuron``), so equal kernels no longer mean equal results (check/script_judge.py)."""
    import torch

    shapes, seen, todo = [], set(), [loss.grad_fn]
    while todo and len(seen) < GRAPH_NODES_LIMIT:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr, None)
                if isinstance(value, torch.Tensor):
                    shapes.append([node.name(), attr[len("_saved_"):], list(value.shape)])
        todo.extend(next_node for next_node, _ in node.next_functions)
    return sorted(shapes)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` once a named module has been imported (safetensors.torch is imported
    by the script or its libraries after ``import torch``; patching it then catches save_pretrained too)."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                exec_module, patch = spec.loader.exec_module, self.patches.pop(name)

                def run(module: Any) -> None:
                    exec_module(module)
                    patch(module)

                spec.loader.exec_module = run  # type: ignore[method-assign]
                return spec
        return None


class ScriptRecorder:
    """The recorders of one process and the record they fill."""

    def __init__(self, folder: Path, stop_after: int | None, seed: int | None, seed_offset: int = 0) -> None:
        self.folder, self.stop_after, self.seed, self.seed_offset = folder, stop_after, seed, seed_offset
        self.t0 = float(os.environ.get(T0_ENV) or time.time())
        self.path = folder / f"record-{os.getpid()}.json"
        self.losses: list[tuple[int, Any]] = []  # (steps done before this backward, the loss tensor)
        self.grad_norms: list[Any] = []
        self.clipped_norm: Any = None  # the total norm the script's clip_grad_norm_ returned since the last step
        self.last_params: list[Any] = []
        self.device: Any = None
        self.written = False
        self.record: dict[str, Any] = {
            "pid": os.getpid(), "rank": _int_env("RANK"), "local_rank": _int_env("LOCAL_RANK"),
            "world_size": _int_env("WORLD_SIZE"), "argv": list(sys.argv), "started_s": time.time() - self.t0,
            "seed": seed, "seed_offset": seed_offset, "script_seeded": False, "steps": 0, "step_ends_s": [], "losses": [], "loss_steps": [],
            "grad_norms": [], "checkpoints": [], "parameters": None, "device": None, "peak_memory": None,
            "stopped": None, "error": None, "rehearsal": None, "ended_s": None,
            "first_backward_shapes": None}
        self.rehearsal: _Rehearsal | None = None

    # installation -------------------------------------------------------------------------------
    def install(self) -> None:
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        if self.seed is not None:
            self._seed(torch)
        self._wrap_seed(torch)
        original_backward = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                self._loss(tensors)
            return original_backward(tensors, *args, **kwargs)

        torch.autograd.backward = backward
        original_clip = torch.nn.utils.clip_grad_norm_

        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            total = original_clip(*args, **kwargs)
            self.clipped_norm = total  # the norm before clipping, as the script computed it: no work of ours
            return total

        torch.nn.utils.clip_grad_norm_ = torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._before_step)
        register_optimizer_step_post_hook(self._after_step)
        original_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_save(obj, f, *args, **kwargs)
            self._checkpoint(f, "torch.save")
            return result

        torch.save = save
        sys.meta_path.insert(0, _AfterImport({"safetensors.torch": self._patch_safetensors}))
        self.rehearsal = _Rehearsal.open()
        previous_hook = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            self._error(exc, tb)
            previous_hook(kind, exc, tb)

        sys.excepthook = excepthook
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self._terminated)
        atexit.register(self.finish, None)

    def _seed(self, torch: Any) -> None:
        import random

        random.seed(self.seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(self.seed)
        torch.manual_seed(self.seed + self.seed_offset)

    def _wrap_seed(self, torch: Any) -> None:
        """Note a seed the script sets itself (HF's set_seed, accelerate's, and plain calls end here)."""
        original = torch.random.manual_seed

        def manual_seed(seed: Any) -> Any:
            self.record["script_seeded"] = True
            return original(int(seed) + self.seed_offset)

        torch.manual_seed = torch.random.manual_seed = manual_seed

    def _patch_safetensors(self, module: Any) -> None:
        for name in ("save_file", "save_model"):
            original = getattr(module, name, None)
            if original is None:
                continue

            def wrapped(*args: Any, _original: Callable = original, **kwargs: Any) -> Any:
                result = _original(*args, **kwargs)
                path = kwargs.get("filename", args[1] if len(args) > 1 else None)
                self._checkpoint(path, "safetensors")
                return result

            setattr(module, name, wrapped)

    # recorders ----------------------------------------------------------------------------------
    def _loss(self, loss: Any) -> None:
        if self.device is None:
            self.device = loss.device
            self.record["device"] = str(loss.device)
        if not self.losses:
            with contextlib.suppress(Exception):
                self.record["first_backward_shapes"] = graph_shapes(loss)
        self.losses.append((self.record["steps"], loss))

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        if self.clipped_norm is not None:  # the script clipped: its own norm, taken before the clipping
            self.grad_norms.append(self.clipped_norm)
            self.clipped_norm = None
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        with self._excluded():
            local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
            self.grad_norms.append(torch.nn.utils.get_total_norm(local) if local else None)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        with self._excluded():
            if self.device is not None and torch.accelerator.is_available() \
                    and torch.accelerator.current_accelerator().type == self.device.type:
                torch.accelerator.synchronize()
        self.record["steps"] += 1
        self.record["step_ends_s"].append(time.time() - self.t0)
        self.last_params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.rehearsal is not None:
            self.rehearsal.step()
        if self.stop_after is not None and self.record["steps"] >= self.stop_after:
            self.finish(f"--steps {self.stop_after}")
            raise SystemExit(0)

    @contextlib.contextmanager
    def _excluded(self) -> Iterator[None]:
        """Run the recorder's own device work outside the rehearsal's counts."""
        if self.rehearsal is None:
            yield
            return
        with self.rehearsal.excluded():
            yield

    def _checkpoint(self, f: Any, how: str) -> None:
        if isinstance(f, (str, os.PathLike)):
            self.record["checkpoints"].append({"path": os.path.abspath(os.fspath(f)), "how": how,
                                               "step": self.record["steps"], "at_s": time.time() - self.t0})

    def _error(self, exc: BaseException, tb: Any) -> None:
        from torchferry.errors import kind_of

        frame = user_frame(tb)
        message = str(exc) or type(exc).__name__
        self.record["error"] = {
            "kind": kind_of(exc), "type": type(exc).__name__, "message": message,
            "placement": PLACEMENT_TEXT in message,
            "traceback": "".join(traceback.format_exception(type(exc), exc, tb)),
            "file": frame.filename if frame else None, "line": frame.lineno if frame else None,
            "code": frame.line if frame else None, "step": self.record["steps"]}
        self.finish("error")

    def _terminated(self, signum: int, frame: Any) -> None:
        self.finish("terminated")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    # the record ---------------------------------------------------------------------------------
    def finish(self, stopped: str | None) -> None:
        """Read every kept tensor once and write the record (once; later calls only update the stop reason)."""
        if self.written:
            return
        if not (self.losses or self.record["steps"] or self.record["checkpoints"] or self.record["error"]):
            return  # a launcher, data-loader worker or helper process: nothing of the script's training ran here
        self.written = True
        import torch

        r = self.record
        r["stopped"] = stopped
        r["ended_s"] = time.time() - self.t0
        with contextlib.suppress(Exception):
            r["losses"] = [float(loss.detach().float().cpu()) for _, loss in self.losses]
            r["loss_steps"] = [step for step, _ in self.losses]
            r["grad_norms"] = [None if n is None else float(n.detach().float().cpu()) for n in self.grad_norms]
        with contextlib.suppress(Exception):
            r["parameters"] = self._parameters(torch)
        if self.device is not None:
            from torchferry.harness import devices

            with contextlib.suppress(Exception):
                r["peak_memory"] = dataclasses.asdict(devices.peak_memory(self.device))
        if self.rehearsal is not None:
            with contextlib.suppress(Exception):
                r["rehearsal"] = self.rehearsal.totals(r["error"])
        self._write(torch)

    def _parameters(self, torch: Any) -> dict | None:
        if not self.last_params:
            return None
        digests = [tensor_digest(p) for p in self.last_params]
        numel = sum(int(p.numel()) for p in self.last_params)
        return {"count": len(digests), "numel": numel, "digests": digests,
                "kept": numel <= PARAMETER_TENSORS_LIMIT}

    def _write(self, torch: Any) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record))
        os.replace(tmp, self.path)
        if self.record["parameters"] and self.record["parameters"]["kept"]:
            tensors = [(p.to_local() if hasattr(p, "to_local") else p).detach().to("cpu") for p in self.last_params]
            target = self.path.with_suffix(".pt")
            with contextlib.suppress(Exception):
                torch.serialization.save(tensors, str(target) + ".tmp")
                os.replace(str(target) + ".tmp", target)


RANDOM_OPS = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "exponential", "geometric",
              "cauchy", "log_normal", "random_")  # op names that draw from the device's generator


class _Rehearsal:
    """Per-step counts of a device that emulates another (its predictions), minus the recorder's own work.

    One measurement window (torchferry/harness/window.py) stays open from the recorder's installation to the
    end of the process; a step's counts are the difference of its cheap counters (``Window.counts``) at
    consecutive step ends, less those of the spans around the recorder's own device work (the full reading,
    memory and known issues included, is taken once, at the end). Step 1 therefore counts everything from
    ``import torch`` to the end of the first optimizer step (building the model and moving it included)."""

    def __init__(self, device: Any) -> None:
        from torchferry.harness.window import Window

        self.device = device
        self.window = Window(device, clear=False)
        self.opened = self.last = self.window.counts()
        self.skipped: list[Any] = []  # the counts of the recorder's own work in the current step
        self.all_skipped: list[Any] = []
        self.steps: list[dict] = []

    @classmethod
    def open(cls) -> _Rehearsal | None:
        """A rehearsal when this process runs on torchferry's built-in device (registered at ``import torch``)."""
        import torch

        from torchferry.harness import devices

        api = sys.modules.get("torchferry.device")
        if api is None or not api.is_enabled() or not torch.accelerator.is_available():
            return None
        device = torch.accelerator.current_accelerator()
        return cls(device) if devices.emulates(device) else None

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        before = self.window.counts()  # the cheap counters: this runs twice per step
        try:
            yield
        finally:
            span = self.window.counts().minus(before)
            self.skipped.append(span)
            self.all_skipped.append(span)

    def step(self) -> None:
        """Close one step: its counts since the last step end, less the recorder's own."""
        now = self.window.counts()
        p = now.minus(self.last, *self.skipped)
        self.steps.append({"signatures": p.signatures, "compilations": p.compilations, "cache_hits": p.cache_hits,
                           "host_syncs": {k: n for k, n in p.host_syncs.items() if n > 0}, "inputs": {}})
        self.last, self.skipped = now, []

    def totals(self, error: dict | None) -> dict:
        """The run's rehearsal record, in the format check/rehearsal.py judges."""
        import dataclasses

        reading = self.window.read()
        ops = self.window.counts().minus(self.opened, *self.all_skipped)
        fallback = {k: n for k, n in ops.fallback.items() if n > 0}
        predictions = reading.predictions
        seen = {*dict(self.window.module.get_executed_ops()), *dict(self.window.module.get_fallback_ops())}
        record = {"emulates": predictions.profile, "numerics": predictions.numerics, "steps": self.steps,
                  "fallback_ops": fallback, "executed_calls": ops.executed,
                  "fallback_reasons": {k: v for k, v in predictions.fallback_reasons.items() if k in fallback},
                  "peak_bytes": dataclasses.asdict(reading.memory)["bytes"], "capacity_bytes": predictions.capacity_bytes,
                  "random_ops": sorted(op for op in seen if any(r in op for r in RANDOM_OPS))}
        if error and error.get("placement"):
            op, devices, argument = _placement_parts(error["message"])
            record["placement"] = {"op": op, "devices": devices, "argument": argument, "file": error["file"],
                                   "line": error["line"], "code": error["code"],
                                   "message": next((ln.strip() for ln in error["message"].splitlines()
                                                    if PLACEMENT_TEXT in ln), error["message"])}
        return record


def _placement_parts(message: str) -> tuple[str, list[str], str | None]:
    """The op, the devices and the argument named by PyTorch's placement error message."""
    import re

    devices = re.search(r"devices?, (\S+) and (\S+?)!", message)
    op = re.search(r"in method (?:wrapper_\w*?_)?(\w+)\)", message)
    argument = re.search(r"argument for argument (\w+)", message)
    return (op.group(1) if op else "an op", list(devices.groups()) if devices else [],
            argument.group(1) if argument else None)


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None
