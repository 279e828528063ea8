"""Recorders installed in every process of an unchanged training script (`ferry check -- COMMAND`).

PyTorch calls every ``torch.backends`` entry point at the end of ``import torch``; torchferry's
second entry point is ``autoload`` here. It does nothing unless ``RECORD_ENV`` names a folder, so
installing torchferry changes no one's ``import torch``. When it is set (by `ferry check` for its
own children only), the process records, without any change to the script, into one typed record
(``ScriptRecord``, check/script/record.py, a file per process):

- the loss of every ``backward()`` on a scalar, read as a Python float at once (nothing is kept
  alive: the script's memory is its own), and the backward calls;
- optimizer steps, from PyTorch's global optimizer hooks: one ``optimizer.step()`` call is a step;
- the gradient norm of each step: the total norm the script's own ``clip_grad_norm_`` returned (taken
  before clipping, and no work of ours), else computed from this rank's local gradients;
- the final parameters of every optimizer that stepped (a GAN's generator and discriminator apart; the ones
  it can change, ``requires_grad``), each tensor's digest and name, and the final floating-point buffers
  of the models they belong to (a BatchNorm's running statistics: what an evaluation and a checkpoint
  read beside the parameters);
- each module's output at the first forward and each parameter's gradient after the first backward
  (check/convergence.py's ``ModuleTracer``: a digest and a few numbers each), so that a parity failure
  names the first module where the two sides differ;
- every checkpoint written (``torch.save`` to a path or an open file, safetensors, and so
  ``save_pretrained``), by path;
- the step end times and the peak memory of the device the losses live on;
- on a device that emulates another, the rehearsal (check/rehearsal.py's ``Recorder``, the one the
  worker pipeline uses); the recorder's own device work (reading a loss, the gradient norm, the
  step-end synchronisation) is taken out of its counts.

``STEPS_ENV`` stops the script cleanly (``SystemExit(0)``) after that many steps. ``SEED_ENV``
seeds Python's, NumPy's and torch's RNGs at start; a later ``torch.manual_seed`` from the script
is noted (the report then says the script seeds itself). ``NOISE_ENV`` makes this run the
reference's noise run: every parameter an optimizer is given moves by one unit in the last place
(check/convergence.py ``perturb``), every seed kept. The record is written atomically at exit (``os._exit`` included),
at the ``--steps`` stop, on SIGTERM, on ``FLUSH_SIGNAL`` (the parent asks for it before it stops a
script that may ignore SIGTERM), after an uncaught exception (whose traceback and user line it
keeps), and at a step end at most every ``FLUSH_S`` seconds, so that a killed script loses little.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchferry.harness.protocol import T0_ENV

RECORD_ENV = "TORCHFERRY_RECORD"  # folder of the records; unset: the recorders stay off
STEPS_ENV = "TORCHFERRY_RECORD_STEPS"  # stop after this many optimizer steps
SEED_ENV = "TORCHFERRY_RECORD_SEED"  # seed the RNGs at start
NOISE_ENV = "TORCHFERRY_RECORD_NOISE"  # 1: the reference's noise run (parameters moved by one ulp)
FLOPS_ENV = "TORCHFERRY_RECORD_FLOPS"  # 1: count the second step's FLOPs (the reference run)
HOST_DRAWS_ENV = "TORCHFERRY_RECORD_HOST_DRAWS"  # 1: draw random numbers on the host (check/streams.py)
KEEP_ENV = "TORCHFERRY_RECORD_KEEP"  # folder where a file of the user's is copied before the script overwrites it
STARTED_ENV = "TORCHFERRY_CHECK_STARTED"  # when the check started (time.time()): older files are the user's
PARAMETER_TENSORS_LIMIT = 50_000_000  # final parameters up to this many elements are kept whole (else hashed only)
FLUSH_SIGNAL = signal.SIGUSR1  # the parent's "write your record now"
FLUSH_S = 5.0  # at a step end, the record is rewritten when the last write is older than this
GRAPH_NODES_LIMIT = 20_000  # nodes of the first backward's graph read for its tensor shapes
# Light at import: PyTorch imports this module at every `import torch` (the entry point), so it imports nothing of
# torchferry's but the protocol's constant; the record's types (check/script/record.py) are imported when it records.

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
                               os.environ.get(NOISE_ENV, "") == "1", os.environ.get(FLOPS_ENV, "") == "1")
    _recorder.install()


def graph_metadata(loss: Any) -> tuple[list[list], list[str]]:
    """What the first backward's autograd graph saved, read once and only from metadata (no device work): the
    shapes of the tensors its nodes saved, as ``[node, attribute, shape]`` sorted, and the floating dtypes of every
    tensor it saved, compiled graphs' included.

    The shapes: two runs of one script whose lists differ computed on other shapes: a library chose them per device
    (TRL pads batches to a multiple of 128 on ``neuron``), so equal kernels no longer mean equal results
    (check/parity.py). The dtypes: the precision the step computed in, which the module trace cannot see once the
    script compiles its model (its hooks stand aside); a ``torch.compile``\'d forward is one node here
    (``CompiledFunctionBackward``) whose ``saved_tensors`` hold its activations, bfloat16 under bfloat16 autocast
    (convergence.Floor)."""
    import torch

    shapes, dtypes, seen, todo = [], set(), set(), [loss.grad_fn]
    while todo and len(seen) < GRAPH_NODES_LIMIT:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        saved = [attr for attr in dir(node) if attr.startswith("_saved_")]
        for attr in saved:
            value = getattr(node, attr, None)
            if isinstance(value, torch.Tensor):
                shapes.append([node.name(), attr[len("_saved_"):], list(value.shape)])
                dtypes.add(value.dtype)
        if not saved:  # a Python autograd.Function's node (a compiled graph's among them): what it saved for backward
            with contextlib.suppress(Exception):
                dtypes.update(t.dtype for t in getattr(node, "saved_tensors", None) or () if isinstance(t, torch.Tensor))
        todo.extend(next_node for next_node, _ in node.next_functions)
    return sorted(shapes), sorted(str(d).removeprefix("torch.") for d in dtypes if d.is_floating_point)


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


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


class ScriptRecorder:
    """The recorders of one process and the record they fill."""

    def __init__(self, folder: Path, stop_after: int | None, seed: int | None, noise: bool = False,
                 count_flops: bool = False) -> None:
        self.folder, self.stop_after, self.seed, self.noise = folder, stop_after, seed, noise
        self.flop_counter: Any = None  # the step counter, from the end of step 1 over one iteration, in a run asked to count
        self.counted_optimizers: set[int] = set()  # the optimizers that stepped while it counted
        self.count_flops = count_flops
        self.t0 = float(os.environ.get(T0_ENV) or time.time())
        self.path = folder / f"record-{os.getpid()}.json"
        self.clipped_norm: float | None = None  # the total norm the script's clip_grad_norm_ returned since the last step
        self.stepped: dict[int, list[Any]] = {}  # id(optimizer) -> its parameters, in the order optimizers first stepped
        self.device: Any = None
        self.ended = False  # the final record is written
        self.last_write = 0.0
        from torchferry.check.script.record import ScriptRecord

        self.record = ScriptRecord(pid=os.getpid(), rank=_int_env("RANK"), local_rank=_int_env("LOCAL_RANK"),
                                   world_size=_int_env("WORLD_SIZE"), argv=list(sys.argv),
                                   started_s=time.time() - self.t0, seed=seed, noise=noise)
        self.rehearsal: Any = None  # check/rehearsal.py's Recorder, on a device that emulates another
        self.tracer: Any = None  # check/convergence.py's ModuleTracer, until the first backward
        self.optimizers = 0  # optimizers the script made: without one, a step is a backward call
        self.step_inputs: dict[str, list[int]] = {}  # the shapes each model was first called with in the step
        self._arm_input_watch: Callable[[], None] = lambda: None  # watches them again for the next step
        self._disarm_input_watch: Callable[[], None] = lambda: None  # stops watching, for good
        self._unwatch_forwards: Callable[[], None] = lambda: None  # stops counting forward calls, for good
        self.moved: set[int] = set()  # the noise run's parameters moved by one ulp already
        self.compiles = False  # the script called torch.compile: the global module hooks are gone
        self.traced: Any = None  # the same, after it (it names the parameters)

    # installation -------------------------------------------------------------------------------
    def install(self) -> None:
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        if os.environ.get(HOST_DRAWS_ENV) == "1":  # an accelerator with a generator of its own: one stream
            from torchferry.check.streams import draw_on_host

            draw_on_host()
        if self.seed is not None:
            self._seed(torch)
        self._wrap_seed(torch)
        original_backward = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            scalar = isinstance(tensors, torch.Tensor) and tensors.numel() == 1
            if scalar:
                self._loss(tensors)
            result = original_backward(tensors, *args, **kwargs)
            if scalar:
                self._backward_done()
            return result

        torch.autograd.backward = backward
        original_clip = torch.nn.utils.clip_grad_norm_

        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            total = original_clip(*args, **kwargs)
            self._clipped(total)
            return total

        torch.nn.utils.clip_grad_norm_ = torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._before_step)
        register_optimizer_step_post_hook(self._after_step)
        original_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            self._keep_users_file(f)
            result = original_save(obj, f, *args, **kwargs)
            self._checkpoint(f, "torch.save")
            return result

        torch.save = save
        sys.meta_path.insert(0, _AfterImport({"safetensors.torch": self._patch_safetensors}))
        self.rehearsal = self._open_rehearsal()
        from torchferry.check.convergence import ModuleTracer, perturb

        self.tracer = ModuleTracer(self._excluded)
        self._watch_forwards()
        original_compile = torch.compile

        def compile(*args: Any, **kwargs: Any) -> Any:
            self._stand_aside_for_dynamo()
            return original_compile(*args, **kwargs)

        torch.compile = functools.wraps(original_compile)(compile)
        original_init = torch.optim.Optimizer.__init__

        def init(optimizer: Any, params: Any, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, params, *args, **kwargs)
            self.optimizers += 1
            if self.noise:  # the noise run: every parameter moved by one ulp, once
                perturb([p for group in optimizer.param_groups for p in group["params"] if id(p) not in self.moved])
                self.moved.update(id(p) for group in optimizer.param_groups for p in group["params"])

        torch.optim.Optimizer.__init__ = init
        previous_hook = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            self._error(exc, tb)
            previous_hook(kind, exc, tb)

        sys.excepthook = excepthook
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self._terminated)
        if signal.getsignal(FLUSH_SIGNAL) in (signal.SIG_DFL, None):
            signal.signal(FLUSH_SIGNAL, self._flush)
        original_exit = os._exit

        def _exit(status: int) -> None:  # a launcher's way out skips atexit: the record is written first
            self.finish(None)
            original_exit(status)

        os._exit = _exit
        atexit.register(self.finish, None)

    def _open_rehearsal(self) -> Any:
        """The rehearsal recorder when this process runs on torchferry's built-in device (registered at ``import torch``)."""
        import torch

        api = sys.modules.get("torchferry.device")
        if api is None or not api.is_enabled() or not torch.accelerator.is_available():
            return None
        from torchferry.check.rehearsal import Recorder

        recorder = Recorder.start(None, torch.accelerator.current_accelerator())
        if recorder is not None:
            self.record.rehearsal = recorder.record  # filled in place: every write of this record carries it
        return recorder

    def _seed(self, torch: Any) -> None:
        import random

        random.seed(self.seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(self.seed)
        torch.manual_seed(self.seed)

    def _wrap_seed(self, torch: Any) -> None:
        """Note a seed the script sets itself (HF's set_seed, accelerate's, and plain calls end here)."""
        original = torch.random.manual_seed

        def manual_seed(seed: Any) -> Any:
            self.record.script_seeded = True
            return original(seed)

        torch.manual_seed = torch.random.manual_seed = manual_seed

    def _patch_safetensors(self, module: Any) -> None:
        for name in ("save_file", "save_model"):
            original = getattr(module, name, None)
            if original is None:
                continue

            def wrapped(*args: Any, _original: Callable = original, **kwargs: Any) -> Any:
                path = kwargs.get("filename", args[1] if len(args) > 1 else None)
                self._keep_users_file(path)
                result = _original(*args, **kwargs)
                self._checkpoint(path, "safetensors")
                return result

            setattr(module, name, wrapped)

    # recorders ----------------------------------------------------------------------------------
    def _loss(self, loss: Any) -> None:
        r = self.record
        if self.device is None:
            self.device = loss.device
            r.device = str(loss.device)
        if not r.losses:
            with contextlib.suppress(Exception):
                r.first_backward_shapes, r.first_backward_dtypes = graph_metadata(loss)
        with self._excluded():
            value = float(loss.detach())  # read now: no loss tensor (and no graph) is kept alive
        r.losses.append(value)
        r.loss_steps.append(r.steps)
        r.backwards += 1

    def _backward_done(self) -> None:
        """After a backward on a scalar: the first completes the module trace; without an optimizer a backward call is
        the script's step (its time, its rehearsal counts, --steps)."""
        r = self.record
        if r.backwards == 1:  # training: forward calls are no longer steps
            self._unwatch_forwards()
            if r.forwards and self.rehearsal is not None:
                self.rehearsal.restart_steps()
        if self.tracer is not None:
            with contextlib.suppress(Exception):
                r.modules = self.tracer.finish()
                self._watch_inputs(self.tracer)
            self.traced, self.tracer = self.tracer, None
        r.backward_ends_s.append(time.time() - self.t0)
        if self.optimizers or r.steps:
            return
        self._count_flops(r.backwards)
        if self.rehearsal is not None:
            self.rehearsal.step(dict(self.step_inputs))
            self._arm_input_watch()
        if self.stop_after is not None and r.backwards >= self.stop_after:
            self.finish(f"--steps {self.stop_after} (backward calls: the script makes no optimizer)")
            raise SystemExit(0)

    def _watch_forwards(self) -> None:
        """Until the first backward, each call of an outermost module (one no running module called) is a step of a
        script that may never call backward (inference): its time, its rehearsal's counts and the shapes it was called
        with. In the noise run, a module's parameters not yet moved (no optimizer was made yet) are moved by one ulp
        before it runs: an inference script has no optimizer to move them at."""
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        from torchferry.check.convergence import input_shapes, is_compiling, perturb

        depth = 0

        def pre_hook(module: Any, inputs: Any) -> None:
            nonlocal depth
            if is_compiling():
                return
            if depth == 0:
                if self.noise and not self.optimizers:
                    fresh = [p for p in module.parameters() if id(p) not in self.moved]
                    perturb(fresh)
                    self.moved.update(id(p) for p in fresh)
                self.step_inputs = {f"{type(module).__name__} input {k}": v for k, v in input_shapes(inputs).items()}
            depth += 1

        def hook(module: Any, inputs: Any, output: Any) -> None:
            nonlocal depth
            if is_compiling() or depth == 0:
                return
            depth -= 1
            if depth == 0 and output is not None:
                self._forward_done(output)

        handles = [register_module_forward_pre_hook(pre_hook), register_module_forward_hook(hook, always_call=True)]

        def unwatch() -> None:
            for handle in handles:
                handle.remove()
            self._unwatch_forwards = lambda: None

        self._unwatch_forwards = unwatch

    def _forward_done(self, output: Any) -> None:
        """An outermost module's call ended before any backward: an inference step (its device is where its output is)."""
        import torch

        r = self.record
        if self.device is None:
            from torchferry.harness.portable import flatten

            tensor = next((t for t in flatten(output).values() if isinstance(t, torch.Tensor)), None)
            if tensor is not None:
                self.device = tensor.device
                r.device = str(tensor.device)
        r.forwards += 1
        r.forward_ends_s.append(time.time() - self.t0)
        if self.rehearsal is not None:
            self.rehearsal.step(dict(self.step_inputs))
        if time.monotonic() - self.last_write > FLUSH_S:
            self.write()

    def _watch_inputs(self, tracer: Any) -> None:
        """On a rehearsed device, from the first backward on, the shapes each model is first called with in a step (the
        rehearsal names a batch shape that changes; the first step's come from the trace)."""
        if self.rehearsal is None or self.compiles:  # nothing else reads them; or the script compiles (above)
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        from torchferry.check.convergence import input_shapes, is_compiling

        names = tracer.names()
        # the models, not a loss module called beside them (fed their outputs; watching it would keep the hook on
        # through the whole forward)
        models = [root for root in tracer.roots() if next(root.parameters(), None) is not None]
        self.step_inputs = {f"{names[id(root)]} input {k}": v for root in models
                            for k, v in tracer.inputs.get(id(root), {}).items()}
        roots = {id(root) for root in models}
        unseen: set[int] = set()
        hook: Any = None

        def pre_hook(module: Any, inputs: Any) -> None:
            nonlocal hook
            if id(module) in unseen and not is_compiling():
                self.step_inputs.update({f"{names[id(module)]} input {k}": v for k, v in input_shapes(inputs).items()})
                unseen.discard(id(module))
                if not unseen:  # every model seen: the rest of the step takes PyTorch's hook-free path (measured
                    hook.remove()  # bench/script_overhead.py: a global hook on every call cost 0.4-0.6 ms a step)
                    hook = None

        def arm() -> None:
            """Before each step: a global hook, kept on no module of the user's (a model pickled whole by
            torch.save(model) stays as it was)."""
            nonlocal hook
            unseen.update(roots)
            if hook is None:
                hook = register_module_forward_pre_hook(pre_hook)

        def disarm() -> None:
            nonlocal hook
            if hook is not None:
                hook.remove()
                hook = None
            self._arm_input_watch = lambda: None

        self._arm_input_watch, self._disarm_input_watch = arm, disarm

    def _stand_aside_for_dynamo(self) -> None:
        """At the script's torch.compile (``torch.compile(model)``, ``model.compile()``, a decorator): Dynamo guards on
        how many global module hooks there are, so removing the recorders' (the module trace after the first backward,
        the input watch within each step) would recompile the script's graphs, and PyTorch warns about global hooks at
        every call of a compiled module. They go for the rest of the run, so that the script compiles the graphs it
        compiles without torchferry; lost with them: the first divergent module and the per-step model input shapes
        (the compile backend's records name each graph's inputs)."""
        self.compiles = True
        self._unwatch_forwards()
        if self.tracer is not None:
            self.tracer.handle.remove()
        self._disarm_input_watch()

    def _clipped(self, total: Any) -> None:
        """The total norm the script's clip_grad_norm_ returned: the norm before clipping, as the script computed it."""
        with self._excluded():
            self.clipped_norm = float(total)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        if self.clipped_norm is not None:  # the script clipped: its own norm, taken before the clipping
            self.record.grad_norms.append(self.clipped_norm)
            self.clipped_norm = None
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        with self._excluded():
            local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
            self.record.grad_norms.append(float(torch.nn.utils.get_total_norm(local)) if local else None)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        with self._excluded():
            if self.device is not None and torch.accelerator.is_available() \
                    and torch.accelerator.current_accelerator().type == self.device.type:
                torch.accelerator.synchronize()
        r = self.record
        r.steps += 1
        now = time.time() - self.t0
        r.step_ends_s.append(now)
        if id(optimizer) not in self.stepped:  # the parameters it can change: a frozen one (requires_grad False: a
            # LoRA run's base model, which PEFT's adapter checkpoint rightly leaves out) never gets a gradient
            self.stepped[id(optimizer)] = [p for group in optimizer.param_groups for p in group["params"]
                                           if p.requires_grad]
        self._count_flops(r.steps, id(optimizer))
        if self.rehearsal is not None:
            if r.steps == 1:  # steps counted per backward call so far (no optimizer had stepped): step 1 starts anew
                self.rehearsal.restart_steps()
            self.rehearsal.step(dict(self.step_inputs))
            self._arm_input_watch()
            self.rehearsal.record.steps_per_iteration = len(self.stepped)
        if self.stop_after is not None and r.steps >= self.stop_after:
            self.finish(f"--steps {self.stop_after}")
            raise SystemExit(0)
        if time.monotonic() - self.last_write > FLUSH_S:
            self.write()

    def _count_flops(self, steps: int, optimizer: int | None = None) -> None:
        """Count the FLOPs of one iteration after the first step (the first builds what it needs once): from the end of
        step 1 until each optimizer that has stepped has stepped once more (one step with one optimizer; a GAN's
        generator step and then its discriminator's), per step. With the step counter `ferry plan` counts with
        (workloads/footprint/counting.py: PyTorch's formulas, each op run as called, where PyTorch's FlopCounterMode
        decomposes the ops it has no formula for and so runs other kernels than the target would). Not in a script
        that compiled (under a dispatch mode its compiled code would run eagerly), nor in one stopped before the
        iteration ends. ``optimizer``: id of the one that made this step (None: a backward call is the step)."""
        if not self.count_flops:
            return
        r = self.record
        if steps == 1:
            dynamo = sys.modules.get("torch._dynamo.utils")
            if dynamo is not None and dynamo.counters["frames"]["ok"]:
                r.flops_skipped = "the script ran torch.compile'd code, which would run eagerly while counted"
            elif self.stop_after is None or self.stop_after >= 2:
                from torchferry.workloads.footprint.counting import step_counter

                self.flop_counter = step_counter()
                self.flop_counter.__enter__()
        elif self.flop_counter is not None:
            r.steps_counted += 1
            if optimizer is not None:
                self.counted_optimizers.add(optimizer)
            if optimizer is None or self.counted_optimizers >= set(self.stepped):
                r.flops_per_step = self._stop_counting() / r.steps_counted
                r.counted_step = 2

    def _stop_counting(self) -> int:
        """Leave the step counter (at the second step's end, or at the end of a run that made no second step)."""
        counter, self.flop_counter = self.flop_counter, None
        if counter is None:
            return 0
        counter.__exit__(None, None, None)
        return counter.flops

    def _excluded(self) -> contextlib.AbstractContextManager[None]:
        """Run the recorder's own device work outside the rehearsal's counts."""
        return contextlib.nullcontext() if self.rehearsal is None else self.rehearsal.excluded()

    def _keep_users_file(self, f: Any) -> None:
        """Before the script overwrites a file that was there before the check started (the user's own), copy it to
        ``KEEP_ENV``'s folder: a check loses nothing of the user's. An open file was truncated already: not kept."""
        folder, started = os.environ.get(KEEP_ENV, ""), float(os.environ.get(STARTED_ENV) or 0)
        if not folder or not isinstance(f, (str, os.PathLike)):
            return
        path = Path(os.fspath(f)).resolve()
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime < started:
                import shutil

                kept = Path(folder) / str(path).lstrip("/")
                if not kept.exists():
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, kept)
                    self.record.kept_files.append(str(path))

    def _checkpoint(self, f: Any, how: str) -> None:
        """A checkpoint written to a path, or to an open file (its name); an in-memory buffer is no checkpoint."""
        name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
        if isinstance(name, (str, os.PathLike)) and os.fspath(name) and not str(os.fspath(name)).startswith("<"):
            from torchferry.check.exit import CheckpointWrite

            self.record.checkpoints.append(CheckpointWrite(path=os.path.abspath(os.fspath(name)), how=how,
                                                           step=self.record.steps, at_s=time.time() - self.t0))

    def _error(self, exc: BaseException, tb: Any) -> None:
        from torchferry.errors import kind_of
        from torchferry.harness.worker import user_frame

        from torchferry.check.rehearsal import placement_of
        from torchferry.check.script.record import ScriptError

        frame = user_frame(tb)
        placement = self.rehearsal.failed(exc) if self.rehearsal is not None else placement_of(exc)
        self.record.error = ScriptError(
            kind=kind_of(exc), type=type(exc).__name__, message=str(exc) or type(exc).__name__,
            traceback="".join(traceback.format_exception(type(exc), exc, tb)),
            file=frame.filename if frame else None, line=frame.lineno if frame else None,
            code=frame.line if frame else None, step=self.record.steps, at_s=time.time() - self.t0,
            placement=placement)
        self.finish("error")

    def _flush(self, signum: int, frame: Any) -> None:
        """The parent asks for the record (it is about to stop the run): with where the main thread is now, the user's
        line a stalled script waits at."""
        from torchferry.harness.worker import user_frame_of_stack

        with contextlib.suppress(Exception):
            at = user_frame_of_stack(frame)
            self.record.waiting_at = f"{at.filename}:{at.lineno} (`{at.line}`)" if at else None
        self.write()

    def _terminated(self, signum: int, frame: Any) -> None:
        self.finish("terminated")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    # the record ---------------------------------------------------------------------------------
    def finish(self, stopped: str | None) -> None:
        """The final record, once: the final parameters, the peak memory and the rehearsal's totals."""
        if self.ended or not self.record.trained:
            return  # written already; or a launcher, data-loader worker or helper process: no training ran here
        self.ended = True
        with contextlib.suppress(Exception):
            self._stop_counting()  # a run that ended before its second step: nothing counted, nothing left entered
        r = self.record
        r.stopped = stopped
        r.ended_s = time.time() - self.t0
        if self.tracer is not None and not r.backwards:  # an inference script: its trace ends with it
            with contextlib.suppress(Exception):
                r.modules = self.tracer.finish()
            self.traced, self.tracer = self.tracer, None
        from torchferry.check.convergence import FinalParameters

        with contextlib.suppress(Exception):
            names = self.parameter_names()
            r.parameters = [FinalParameters.of(params, [names.get(id(p), "") for p in params] if names else None)
                            for params in self.stepped.values()]
        buffers: list[Any] = []
        with contextlib.suppress(Exception):
            buffers, buffer_names = self.final_buffers()
            r.buffers = FinalParameters.of(buffers, buffer_names) if buffers else None
        if self.device is not None:
            from torchferry.harness import devices

            with contextlib.suppress(Exception):
                r.peak_memory = devices.peak_memory(self.device)
        if self.rehearsal is not None:
            with contextlib.suppress(Exception):
                self.rehearsal.finish()
        self.write()
        self._write_tensors(buffers if r.buffers else [])

    def final_buffers(self) -> tuple[list[Any], list[str]]:
        """The floating-point buffers of the models whose parameters an optimizer stepped, and their names (none when
        no optimizer stepped: a script that only evaluates changes no state of its own)."""
        from torchferry.check.convergence import model_buffers

        return model_buffers([p for params in self.stepped.values() for p in params]) if self.stepped else ([], [])

    def parameter_names(self) -> dict[int, str]:
        """id(parameter) -> its path in the model the first forward ran (none when no forward was traced)."""
        return self.traced.parameter_names() if self.traced is not None else {}

    def write(self) -> None:
        """The record as it stands, atomically (a signal handler may call this between any two lines of the script)."""
        if not self.record.trained:
            return
        self.last_write = time.monotonic()
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(self.record.to_dict()))
            os.replace(tmp, self.path)

    def _write_tensors(self, buffers: list[Any]) -> None:
        """The final parameters and ``buffers`` whole, beside the record, when they are small enough (the parity rule
        per tensor)."""
        import torch

        r = self.record
        if not self.stepped or sum(p.numel for p in r.parameters) + (r.buffers.numel if r.buffers else 0) \
                > PARAMETER_TENSORS_LIMIT:
            return

        def host(tensors: list[Any]) -> list[Any]:
            return [(t.to_local() if hasattr(t, "to_local") else t).detach().to("cpu") for t in tensors]

        tensors = {"parameters": [host(params) for params in self.stepped.values()],
                   "buffers": host(buffers)}
        target = self.path.with_suffix(".pt")
        with contextlib.suppress(Exception):
            torch.serialization.save(tensors, str(target) + ".tmp")
            os.replace(str(target) + ".tmp", target)
