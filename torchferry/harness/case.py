"""A model on one device, as both measuring workers handle it: copies, inputs, probes, failures, captures.

`ferry check`'s worker (torchferry.check.worker) and `ferry coverage`'s (torchferry.coverage.worker)
each put a model on a reference and a target device and compare what comes out. What they share lives
here, once:

- copies: ``fresh`` (a deep copy of the pristine CPU model on a device, in eval mode for inference, and
  in float64 for the golden run) and ``moved`` (inputs on a device, floating tensors cast for float64);
- outputs: ``flatten`` (a model output's tensors by name, torchferry.harness.portable) and ``to_cpu``;
- per-module probes: ``probe_modules`` (the first floating output of every module, in execution order),
  what the parity rule localises a divergence with (torchferry.harness.parity.localise);
- generation: ``static_cache`` (whether a model takes ``cache_implementation="static"``);
- the out-of-memory rule: ``is_oom`` and ``is_host_oom`` (this host's memory or the target's own), and
  ``is_compile_error`` (a failure inside Dynamo or Inductor); the failure-to-slug rule itself is
  ``torchferry.errors.kind_of``, applied by ``torchferry.harness.worker.run_case``;
- the typed capture of one worker (``Capture``: a run, a probe, the float64 golden run on the
  reference, the eval outputs on the target) that the parent loads with ``weights_only=True``:
  plain containers of tensors on disk, dataclasses on either side;
- ``ModelCase``: a workload (anything with torchferry.workloads.protocol's ``model``, ``batch``,
  ``forward`` and ``loss_of``) on one device, run as ``StepPlan`` says: fresh and float64 copies, each
  step's batch (this rank's shard of it under several processes), one step per mode (train with the
  plan's optimizer, forward and greedy generate under ``torch.inference_mode``, autocast at the run's
  dtype, a device synchronisation around the timed part), the one ``generate`` argument builder, a run
  of every step, a per-module probe, the first module that turns non-finite, the generators' state and
  the FLOPs of one step. Check and coverage both step through it: where coverage measures otherwise
  (SGD or no optimizer, one batch repeated, the generators seeded once, ``torch.no_grad``, results
  judged in the same process) the plan says so, so that there is one step loop.

Nothing here imports a command (import-linter's harness-not-commands contract).
"""

from __future__ import annotations

import contextlib
import copy
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchferry.errors import NonFiniteError, UsageError
from torchferry.harness import devices
from torchferry.harness.modes import Mode
from torchferry.harness.portable import flatten


def floating(x: Any) -> bool:
    """Whether ``x`` is a floating-point tensor (what the parity rule compares)."""
    return hasattr(x, "is_floating_point") and x.is_floating_point()


def to_cpu(tensors: dict) -> dict:
    """Detached CPU copies (never views of device memory): what a capture holds."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def moved(inputs: Any, device: Any = None, dtype: Any = None) -> Any:
    """``inputs`` (a tensor, or dicts, tuples and lists of them) on ``device`` (None: where they are), floating
    tensors cast to ``dtype`` when given (the float64 golden run); anything else as it is."""
    import torch

    if isinstance(inputs, torch.Tensor):
        if dtype is not None and inputs.is_floating_point():
            return inputs.to(device, dtype) if device is not None else inputs.to(dtype)
        return inputs.to(device) if device is not None else inputs
    if isinstance(inputs, dict):
        return {k: moved(v, device, dtype) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(moved(v, device, dtype) for v in inputs)
    return inputs


def fresh(pristine: Any, device: Any, *, inference: bool, fp64: bool = False) -> Any:
    """A copy of the pristine model on ``device``; in eval mode for inference, as users run it; float64 for the
    golden run. The pristine model is never moved: every run starts from the same weights."""
    import torch

    model = copy.deepcopy(pristine).to(device)
    if inference:
        model.eval()
    return model.to(torch.float64) if fp64 else model


def static_cache(model: Any) -> bool:
    """Whether transformers lets ``model.generate`` use a static cache (no dynamic shapes per token)."""
    return bool(getattr(model, "_can_compile_fullgraph", False))


def probe_modules(model: Any, forward: Callable[[Any], Any]) -> tuple[Any, dict]:
    """``forward(model)``'s output and every module's first floating output (on the CPU), in execution order."""
    modules: dict[str, Any] = {}

    def hook(name: str) -> Callable:
        def capture(_module: Any, _inputs: Any, output: Any) -> None:
            tensors = [t for t in flatten(output).values() if floating(t)]
            if tensors and name not in modules:
                modules[name] = tensors[0].detach().to("cpu", copy=True)

        return capture

    handles = [m.register_forward_hook(hook(n or "<model>")) for n, m in model.named_modules()]
    try:
        output = forward(model)
    finally:
        for h in handles:
            h.remove()
    return output, modules


# -- the out-of-memory rule --------------------------------------------------------------------
def is_oom(exc: BaseException) -> bool:
    """Memory ran out: Python's, torch's, or the CPU allocator's (a RuntimeError under an address-space limit)."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def is_host_oom(exc: BaseException) -> bool:
    """The host ran out (the address-space limit, or the CPU allocator), not the target's own capacity: the
    device raises ``torch.OutOfMemoryError`` naming itself for that (device/csrc/Allocator.cpp ``charge``)."""
    import torch

    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return "can't allocate memory" in text or not isinstance(exc, torch.OutOfMemoryError)


def is_compile_error(exc: BaseException) -> bool:
    """A failure raised by torch.compile's machinery (Dynamo, AOT autograd, Inductor), not by the model."""
    import torch._dynamo.exc as dexc

    if isinstance(exc, dexc.TorchDynamoException):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return any(("torch/_dynamo" in f.filename or "torch/_inductor" in f.filename) for f in frames)


# -- the typed capture ---------------------------------------------------------------------------
@dataclass
class RunCapture:
    """One run of every step: the losses (train), the step times, the first step's gradients (train), the model's
    floating-point buffers after the last step (train: a BatchNorm's running statistics, which no loss or gradient
    shows) and the first call's tokens (generate); under ``StepPlan.in_process``, every step's result as it came
    (``outputs``)."""

    losses: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    grads: dict[str, Any] = field(default_factory=dict)
    buffers: dict[str, Any] = field(default_factory=dict)
    tokens: Any = None
    outputs: list[Any] = field(default_factory=list)


@dataclass
class ProbeCapture:
    """One hooked forward: the model's floating outputs and each module's first floating output."""

    outputs: dict[str, Any]
    modules: dict[str, Any]


@dataclass
class Capture:
    """What one worker hands its parent: the timed run and its probe; the float64 golden capture on the
    reference; the trained model's eval-batch outputs on the target (what the exit formats must reproduce)."""

    run: RunCapture
    probe: ProbeCapture
    golden: Capture | None = None
    eval_outputs: dict[str, Any] | None = None

    def to_payload(self) -> dict:
        """Plain dicts, lists and tensors only: what ``torch.load(weights_only=True)`` accepts."""
        payload: dict[str, Any] = {"run": vars(self.run).copy(), "probe": vars(self.probe).copy()}
        if self.golden is not None:
            payload["golden"] = self.golden.to_payload()
        if self.eval_outputs is not None:
            payload["eval_outputs"] = self.eval_outputs
        return payload

    @classmethod
    def from_payload(cls, payload: dict) -> Capture:
        golden = payload.get("golden")
        return cls(run=RunCapture(**payload["run"]), probe=ProbeCapture(**payload["probe"]),
                   golden=cls.from_payload(golden) if golden is not None else None,
                   eval_outputs=payload.get("eval_outputs"))

    def save(self, path: str | Path) -> None:
        import torch

        torch.save(self.to_payload(), path)

    @classmethod
    def load(cls, path: str | Path) -> Capture:
        """A worker's capture, loaded without unpickling code."""
        import torch

        return cls.from_payload(torch.load(path, weights_only=True))


# -- a workload on one device --------------------------------------------------------------------
OPTIMIZERS = ("adamw", "sgd")  # StepPlan.optimizer's names (None: backward only, no optimizer step)


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """How a case runs its steps: the mode, the seed every step's batch and random draws derive from, the step
    count, the autocast dtype, the optimizer and its learning rate (train), the tokens per generate call
    (generate) and the seed of the held-out eval batch.

    The defaults are `ferry check`'s; the rest say where `ferry coverage` measures otherwise, each kept so
    that its rows stay what they were measured as:

    - ``optimizer``: ``"sgd"``, or None for one forward and backward with no optimizer (the vendor's method);
    - ``seed_each_step``: False seeds the generators once, before step 0, and later steps draw on;
    - ``same_batch``: a run builds step 0's batch once, and every step trains on it;
    - ``inference_mode``: False runs forward and generate under ``torch.no_grad`` instead;
    - ``static_cache``: False generates with the dynamic cache even where the model allows a static one;
    - ``in_process``: the results are judged in this process rather than handed to a parent, so they are
      kept as they came (``RunCapture.outputs``: the loss detached on the CPU, the output, the ``generate``
      output), the first step's gradients stay on their device, and a NaN is the parity rule's to judge
      rather than a ``NonFiniteError``.
    """

    mode: Mode
    seed: int
    steps: int
    dtype: str = "float32"
    optimizer: str | None = "adamw"
    lr: float = 1e-3
    new_tokens: int = 8
    eval_seed: int = 0
    seed_each_step: bool = True
    same_batch: bool = False
    inference_mode: bool = True
    static_cache: bool = True
    in_process: bool = False

    def __post_init__(self) -> None:
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"StepPlan.optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)} or None "
                             "(backward only); pass one of those.")


class ModelCase:
    """A workload's model on one device (rank ``rank`` of ``world`` processes), stepped as ``plan`` says.

    The workload's own model is the pristine copy: it stays on the CPU with its initial weights, and every run
    starts from a fresh copy of it (``fresh``), so that every compared run starts from the same weights."""

    def __init__(self, workload: Any, device: Any, plan: StepPlan, rank: int = 0, world: int = 1) -> None:
        import torch

        self.torch, self.workload, self.device, self.plan = torch, workload, device, plan
        self.rank, self.world = rank, world
        self.pristine = workload.model

    # -- copies and inputs ---------------------------------------------------------------
    def fresh(self, fp64: bool = False) -> Any:
        """A copy of the initial model on this device; in eval mode for forward and generate, as users' inference is."""
        return fresh(self.pristine, self.device, inference=self.plan.mode != Mode.TRAIN, fp64=fp64)

    @staticmethod
    def rows_of(batch: Any) -> int | None:
        """The leading dimension of the batch's first tensor: what --nproc splits."""
        values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else [batch]
        return next((int(t.shape[0]) for t in values if getattr(t, "shape", None)), None)

    def shard(self, batch: Any) -> Any:
        """This rank's equal 1/N slice (dim 0) of every tensor of ``batch``."""
        def cut(t: Any) -> Any:
            if not hasattr(t, "shape") or not t.shape:
                return t
            if t.shape[0] % self.world:
                raise UsageError(f"the batch size {t.shape[0]} does not split into --nproc {self.world} equal shards. "
                                 f"Pass a --batch-size that is a multiple of {self.world}.")
            size = t.shape[0] // self.world
            return t[self.rank * size:(self.rank + 1) * size]

        if isinstance(batch, dict):
            return {k: cut(v) for k, v in batch.items()}
        if isinstance(batch, (tuple, list)):
            return type(batch)(cut(v) for v in batch)
        return cut(batch)

    def batch(self, seed_offset: int, fp64: bool = False) -> Any:
        batch = self.workload.batch(self.device, self.plan.seed + seed_offset)
        return moved(batch, dtype=self.torch.float64) if fp64 else batch

    def seed_step(self, index: int) -> None:
        """Reseed every generator (the CPU's and each device's, through ``torch.manual_seed``) from the run's seed
        and the step: every compared run (fresh, second reference, float64, resume, probe) draws the same random
        numbers (dropout masks) at step ``index`` on either device, whatever ran before (docs/check/parity.md)."""
        self.torch.manual_seed(self.plan.seed + index)

    def no_grad(self) -> Any:
        """Inference as users run it (``torch.inference_mode``) in forward and generate; ``no_grad`` in train, and
        where the plan asks for it."""
        if self.plan.mode == Mode.TRAIN or not self.plan.inference_mode:
            return self.torch.no_grad()
        return self.torch.inference_mode()

    def autocast(self, fp64: bool) -> Any:
        if fp64 or self.plan.dtype == "float32":
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=getattr(self.torch, self.plan.dtype))

    def optimizer(self, model: Any) -> Any:
        """The run's optimizer in train mode (the plan's: AdamW or SGD), none otherwise or when the plan has none."""
        if self.plan.mode != Mode.TRAIN or self.plan.optimizer is None:
            return None
        optimizer = self.torch.optim.AdamW if self.plan.optimizer == "adamw" else self.torch.optim.SGD
        return optimizer(model.parameters(), lr=self.plan.lr)

    def bare(self, model: Any) -> Any:
        """The workload's own module inside DDP and torch.compile: its parameter names and state dict are the plain
        single-process ones (a compiled wrapper's state dict keys carry ``_orig_mod.``, which a plain model rejects)."""
        if self.world > 1:
            model = getattr(model, "module", model)
        return getattr(model, "_orig_mod", model)

    def timed(self, model: Any, compile_backend: str | None = None) -> Any:
        """``model`` as the timed run steps it: inside DistributedDataParallel when several processes train (each on
        its shard, gradients averaged over ranks), then compiled with ``compile_backend`` if one is given. ``bare``
        undoes both."""
        if self.world > 1 and self.plan.mode == Mode.TRAIN:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=None)
        return self.torch.compile(model, backend=compile_backend) if compile_backend else model

    # -- one step of the mode ------------------------------------------------------------
    def step(self, model: Any, opt: Any, index: int, fp64: bool = False,
             watch: Callable[[Any], Any] | None = None, batch: Any = None) -> tuple[float, Any]:
        """Run step ``index``, synchronised; returns (seconds, loss or output or tokens). ``watch(batch)``: a context
        around the step (the rehearsal's recorder); ``batch``: the run's repeated batch (None: step ``index``'s own)."""
        mode, plan = self.plan.mode, self.plan
        if batch is None:
            batch = self.batch(index, fp64)
        if self.world > 1:
            batch = self.shard(batch)
        if plan.seed_each_step or index == 0:
            self.seed_step(index)
        with watch(batch) if watch is not None else contextlib.nullcontext():
            t = time.perf_counter()
            if mode == Mode.TRAIN:
                (opt if opt is not None else model).zero_grad(set_to_none=True)
                with self.autocast(fp64):
                    loss = self.workload.loss_of(self.workload.forward(model, batch), batch)
                loss.backward()
                if opt is not None:
                    opt.step()
                result = loss
            elif mode == Mode.FORWARD:
                with self.no_grad(), self.autocast(fp64):
                    result = self.workload.forward(model, batch)
            else:
                with self.no_grad(), self.autocast(fp64):
                    result = model.generate(**self.generate_kwargs(model, batch))
            devices.synchronize(self.device)
            return time.perf_counter() - t, result

    def generate_kwargs(self, model: Any, batch: dict) -> dict:
        """``model.generate``'s arguments: the batch, greedy for ``new_tokens`` tokens, a static cache where the model
        allows it (no dynamic shapes per token) and the plan keeps it, and the workload's own options when it
        has any (``generate_options(model)``: coverage's scores and its suites' tokens)."""
        options = getattr(self.workload, "generate_options", None)
        kwargs = {**batch, "max_new_tokens": self.plan.new_tokens, "do_sample": False,
                  **(options(model) if options is not None else {})}
        if self.plan.static_cache and static_cache(model):
            kwargs["cache_implementation"] = "static"
        return kwargs

    def units_per_step(self) -> tuple[float, str]:
        """What one step processes: tokens (generated tokens in generate), else samples."""
        batch = self.workload.batch("cpu", self.plan.seed)
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        if self.plan.mode == Mode.GENERATE:
            return float(ids.shape[0] * self.plan.new_tokens), "tokens"
        if ids is not None:
            return float(ids.numel()), "tokens"
        first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0] if isinstance(batch, (tuple, list)) else batch
        return float(first.shape[0]), "samples"

    # -- runs and probes -----------------------------------------------------------------
    def run(self, model: Any, fp64: bool = False, start: int = 0, opt: Any = None,
            watch: Callable[[Any], Any] | None = None,
            after_step: Callable[[int, float, Any, Any], None] | None = None) -> tuple[RunCapture, Any]:
        """Every step of the mode from ``start``: the run's capture and its optimizer (None outside train).
        ``after_step(index, seconds, model, opt)`` follows each step (the primary run's timings and checkpoints)."""
        torch = self.torch
        opt = opt or self.optimizer(model)
        record = RunCapture()
        batch = self.batch(0, fp64) if self.plan.same_batch else None
        for index in range(start, self.plan.steps):
            seconds, result = self.step(model, opt, index, fp64, watch=watch, batch=batch)
            record.times.append(seconds)
            if self.plan.in_process:
                self.keep(record, model, opt, index == start, result)
            elif self.plan.mode == Mode.TRAIN:
                loss = self.global_loss(result)
                if not torch.isfinite(torch.tensor(loss)):
                    raise NonFiniteError(f"loss is {loss} at training step {index + 1}{self.first_nonfinite_module(index, fp64)}")
                record.losses.append(loss)
                if index == start:
                    record.grads = to_cpu({n: p.grad for n, p in self.bare(model).named_parameters() if p.grad is not None})
            elif index == start:
                if self.plan.mode == Mode.GENERATE:
                    record.tokens = result.detach().to("cpu")
                else:
                    self.check_finite(flatten(result), f"step {index + 1}", index, fp64)
            if after_step is not None:
                after_step(index, seconds, model, opt)
        if self.plan.mode == Mode.TRAIN and not self.plan.in_process:
            record.buffers = to_cpu({n: b for n, b in self.bare(model).named_buffers() if floating(b)})
        return record, opt

    def keep(self, record: RunCapture, model: Any, opt: Any, first: bool, result: Any) -> None:
        """A step's result as an in-process judge takes it (``StepPlan.in_process``): no copy it does not need. The
        first step's gradients stay on their device (a float64 host copy of a large vocabulary's gradients would be
        this host's limit, not the model's), cloned only when an optimizer steps on."""
        if self.plan.mode != Mode.TRAIN:
            record.outputs.append(result)
            return
        record.outputs.append(result.detach().cpu())
        if first:
            grads = {n: p.grad for n, p in self.bare(model).named_parameters() if p.grad is not None}
            record.grads = {n: g.detach().clone() for n, g in grads.items()} if opt is not None else grads

    def global_loss(self, loss: Any) -> float:
        """The loss of the whole batch: each rank's shard loss averaged over ranks (equal shards)."""
        loss = loss.detach().float()
        if self.world > 1:
            import torch.distributed as dist

            loss = loss.clone()
            dist.all_reduce(loss)  # SUM: every backend has it (gloo has no AVG)
            loss /= self.world
        return float(loss.item())

    def probe(self, fp64: bool = False, model: Any = None, index: int = 0) -> ProbeCapture:
        """A hooked forward pass on step ``index``'s batch: per-module outputs in execution order."""
        def forward(model: Any) -> Any:
            batch = self.batch(index, fp64)
            self.seed_step(index)
            with self.no_grad(), self.autocast(fp64):
                return self.workload.forward(model, batch)

        output, modules = probe_modules(model if model is not None else self.fresh(fp64), forward)
        return ProbeCapture(outputs=to_cpu({k: v for k, v in flatten(output).items() if floating(v)}), modules=modules)

    def check_finite(self, tensors: dict, where: str, index: int, fp64: bool) -> None:
        bad = [n for n, t in tensors.items() if floating(t) and not bool(self.torch.isfinite(t).all())]
        if bad:
            raise NonFiniteError(f"output {bad[0]!r} has NaN/Inf at {where}{self.first_nonfinite_module(index, fp64)}")

    def first_nonfinite_module(self, index: int, fp64: bool) -> str:
        try:
            modules = self.probe(fp64, model=self.fresh(fp64), index=index).modules
        except Exception:  # the diagnosis must not hide the finding
            return ""
        for name, t in modules.items():
            if not bool(self.torch.isfinite(t).all()):
                return f"; first module with a non-finite output: {name!r}"
        return ""

    def eval_outputs(self, model: Any) -> dict:
        """The trained model's outputs on the eval batch in eval mode, as the exit loader computes them (no dropout)."""
        batch = self.workload.batch(self.device, self.plan.eval_seed)
        training = model.training
        model.eval()
        try:
            with self.torch.inference_mode(), self.autocast(False):
                return to_cpu({k: v for k, v in flatten(self.workload.forward(model, batch)).items() if floating(v)})
        finally:
            model.train(training)  # the live model goes on with the steady-state steps

    def fresh_step(self) -> Any:
        """Step 1 of a fresh model, untimed (the rehearsal profiles it)."""
        model = self.fresh()
        return self.step(model, self.optimizer(model), 0)

    def flops_per_step(self) -> float:
        """The FLOPs of step 1 of a fresh model (torch.utils.flop_counter's formulas)."""
        from torch.utils.flop_counter import FlopCounterMode

        model = self.fresh()
        counter = FlopCounterMode(display=False)
        with counter:
            self.step(model, self.optimizer(model), 0)
        return float(counter.get_total_flops())

    # -- random generators ---------------------------------------------------------------
    def rng_draws(self) -> list[float]:
        """Four uniform draws on this device right after seeding: compared across devices, they say when the two
        generators give other numbers for the same seed (docs/check/parity.md)."""
        self.torch.manual_seed(self.plan.seed)
        return self.torch.rand(4, device=self.device).cpu().tolist()

    def rng_state(self) -> dict:
        """The CPU's generator state, and the device's where its module has one (what a checkpoint saves)."""
        module = devices.device_module(self.device)
        state = {"cpu": self.torch.get_rng_state()}
        if self.device.type != "cpu" and hasattr(module, "get_rng_state"):
            state["device"] = module.get_rng_state()
        return state

    def set_rng_state(self, state: dict) -> None:
        """Restore ``rng_state()``'s generators (loaded with ``map_location`` the device: moved back to the CPU)."""
        self.torch.set_rng_state(state["cpu"].cpu())
        module = devices.device_module(self.device)
        if "device" in state and hasattr(module, "set_rng_state"):
            module.set_rng_state(state["device"].cpu())
