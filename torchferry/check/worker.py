"""One device's side of `ferry check`, run in its own process: `python -m torchferry.check.worker JOB.json`.

A crash here (segfault, abort, OOM kill) ends this process only; the runner reports it.
It speaks the harness's worker protocol (torchferry.harness.protocol): JSON events on the
original stdout (the user's prints go to stderr, the runner's log), commands as JSON lines on
stdin after the main job. Tensors go, on the CPU, to the path the runner chose (``job["tensors"]``),
holding only tensors and plain containers so that the runner loads them with ``weights_only=True``.
Wall-clock times are relative to ``TORCHFERRY_T0``, the runner's clock just before the spawn.

Under ``--nproc N`` the runner starts the target with ``torch.distributed.run``, which sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and the rendezvous. Ranks join the device's default
process-group backend, train one DistributedDataParallel model, each on its 1/N shard of
every batch, and average the loss over ranks, so the run equals one process on the global
batch. Rank 0 speaks for the group (tensors, checkpoints, exit formats) and reads the
runner's commands; every rank reports its own timings.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from torchferry.check.config import CheckConfig
from torchferry.check import timing
from torchferry.check.rehearsal import RECORD, Recorder
from torchferry.errors import NonFiniteError, OutputError, UsageError, disk_full
from torchferry.harness import case
from torchferry.harness.case import Capture, ProbeCapture, RunCapture, flatten, floating, to_cpu
from torchferry.harness.modes import Mode
from torchferry.harness.window import Window
from torchferry.harness.worker import Channel, run_case

T_MAIN = time.time()
ROLE_ENV = "TORCHFERRY_CHECK_ROLE"  # "ref" | "target" | "resume" | "numerics": visible to workloads, for test fixtures
NUMERICS_ENV = "TORCHFERRY_NUMERICS"  # the "numerics" role reruns the target with host numerics
# A failed rank stays alive this long after reporting: its launcher would otherwise stop every other rank at
# once, and the runner could no longer tell a peer that hangs from one that was stopped (it waits 10 s).
FAILED_RANK_WAIT_S = 60.0

class Session:
    """The workload on one device: the runs, probes and saves the runner asks for."""

    def __init__(self, job: dict, channel: Channel) -> None:
        self.job, self.cfg, self.channel = job, CheckConfig.from_dict(job["config"]), channel
        self.t0 = float(os.environ.get("TORCHFERRY_T0", T_MAIN))
        self.outdir = Path(job["outdir"])
        self.timing: dict[str, Any] = {"python_start_s": T_MAIN - self.t0}
        self.excluded_s = 0.0  # time spent saving checkpoints inside the timed run
        self.rank, self.world = channel.rank, channel.world
        self.rehearsal: Recorder | None = None  # on a target that emulates another device (rank 0)

    # -- setup -------------------------------------------------------------------------
    def setup(self) -> None:
        t = time.perf_counter()
        import torch

        from torchferry.harness import devices
        from torchferry.workloads.protocol import load_workload

        self.torch, self.devices = torch, devices
        self.timing["import_s"] = time.perf_counter() - t
        self.channel.progress(f"imported torch {torch.__version__} ({self.timing['import_s']:.1f} s)")
        self.device = devices.resolve(self.job["device"])
        self.timing["emulates"] = devices.emulates(self.device)
        if self.world > 1:
            self.join_group()
        t = time.perf_counter()
        torch.manual_seed(self.cfg.seed)
        self.workload = load_workload(self.cfg.workload, self.cfg.workload_options(), self.cfg.workload_source)
        if self.cfg.mode == Mode.GENERATE and not self.workload.generates:
            raise UsageError(
                f"workload {self.cfg.workload!r} does not generate (no `generate`). Valid modes for it: train, forward."
            )
        self.pristine = self.workload.model  # CPU, initial weights: every run starts from a copy
        first = self.workload.batch("cpu", self.cfg.seed)
        self.batch_rows = self.rows_of(first)  # the runner checks the split over --nproc before the first step
        self.channel.send("batch", rows=self.batch_rows)
        if self.world > 1:
            self.shard(first)  # an indivisible batch fails here, on every rank
        self.model = self.fresh()
        if self.job["role"] == "target" and self.rank == 0:
            (self.outdir / RECORD).unlink(missing_ok=True)  # an earlier run's, in a reused output folder
            if self.timing["emulates"]:
                self.rehearsal = Recorder(self.outdir / RECORD, self.device)
        devices.synchronize(self.device)
        self.timing["load_s"] = time.perf_counter() - t
        self.channel.progress(f"built {self.cfg.workload} on {self.device} ({self.timing['load_s']:.1f} s)")

    def join_group(self) -> None:
        """This rank's device (index LOCAL_RANK when the device has several) and the device's own backend."""
        import datetime

        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        module = self.devices.device_module(self.device)
        count = module.device_count() if hasattr(module, "device_count") else 1
        if self.device.index is None and count > 1:
            self.device = self.torch.device(self.device.type, local_rank % count)
            if hasattr(module, "set_device"):
                module.set_device(self.device)
        backend = dist.get_default_backend_for_device(self.device.type)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=self.cfg.timeout))  # env:// from the launcher
        self.channel.progress(f"rank {self.rank} of {self.world} on {self.device}, backend {backend!r}")

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

    def fresh(self, fp64: bool = False) -> Any:
        """A copy of the initial model on this device; in eval mode for forward and generate, as users' inference is."""
        return case.fresh(self.pristine, self.device, inference=self.cfg.mode != Mode.TRAIN, fp64=fp64)

    def seed_step(self, index: int) -> None:
        """Reseed every generator (the CPU's and each device's, through ``torch.manual_seed``) from the check's seed
        and the step: every compared run (fresh, second reference, float64, resume, probe) draws the same random
        numbers (dropout masks) at step ``index`` on either device, whatever ran before (docs/check/parity.md)."""
        self.torch.manual_seed(self.cfg.seed + index)

    def no_grad(self) -> Any:
        """Inference as users run it (``torch.inference_mode``) in forward and generate; ``no_grad`` in train."""
        return self.torch.no_grad() if self.cfg.mode == Mode.TRAIN else self.torch.inference_mode()

    def batch(self, seed_offset: int, fp64: bool = False) -> Any:
        batch = self.workload.batch(self.device, self.cfg.seed + seed_offset)
        return case.moved(batch, dtype=self.torch.float64) if fp64 else batch

    def autocast(self, fp64: bool) -> Any:
        import contextlib

        if fp64 or self.cfg.dtype == "float32":
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=getattr(self.torch, self.cfg.dtype))

    def optimizer(self, model: Any) -> Any:
        return self.torch.optim.AdamW(model.parameters(), lr=self.cfg.lr)

    # -- one step of the mode ------------------------------------------------------------
    def step(self, model: Any, opt: Any, index: int, fp64: bool = False, record: bool = False) -> tuple[float, Any]:
        """Run step ``index``, synchronised; returns (seconds, loss or tokens). ``record``: the rehearsal counts it."""
        mode = self.cfg.mode
        batch = self.batch(index, fp64)
        if self.world > 1:
            batch = self.shard(batch)
        self.seed_step(index)
        with self.rehearsal.step(batch) if record and self.rehearsal else contextlib.nullcontext():
            t = time.perf_counter()
            if mode == Mode.TRAIN:
                opt.zero_grad(set_to_none=True)
                with self.autocast(fp64):
                    loss = self.workload.loss_of(self.workload.forward(model, batch), batch)
                loss.backward()
                opt.step()
                result = loss
            elif mode == Mode.FORWARD:
                with self.no_grad(), self.autocast(fp64):
                    result = self.workload.forward(model, batch)
            else:
                with self.no_grad(), self.autocast(fp64):
                    result = model.generate(**self.generate_kwargs(model, batch))
            self.devices.synchronize(self.device)
            return time.perf_counter() - t, result

    def generate_kwargs(self, model: Any, batch: dict) -> dict:
        kwargs = {**batch, "max_new_tokens": self.cfg.new_tokens, "do_sample": False}
        if case.static_cache(model):
            kwargs["cache_implementation"] = "static"  # where the model allows: no dynamic shapes per token
        return kwargs

    def units_per_step(self) -> tuple[float, str]:
        batch = self.workload.batch("cpu", self.cfg.seed)
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        if self.cfg.mode == Mode.GENERATE:
            return float(ids.shape[0] * self.cfg.new_tokens), "tokens"
        if ids is not None:
            return float(ids.numel()), "tokens"
        first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0] if isinstance(batch, (tuple, list)) else batch
        return float(first.shape[0]), "samples"

    # -- the runs ------------------------------------------------------------------------
    def run(self, model: Any, fp64: bool = False, primary: bool = False, start: int = 0,
            opt: Any = None) -> tuple[RunCapture, Any]:
        """All steps of the mode from ``start``: the run's capture and its optimizer (None outside train). The
        primary run also reports timings and saves checkpoints."""
        torch = self.torch
        opt = opt or (self.optimizer(model) if self.cfg.mode == Mode.TRAIN else None)
        record = RunCapture()
        for index in range(start, self.cfg.steps):
            seconds, result = self.step(model, opt, index, fp64, record=primary)
            record.times.append(seconds)
            if self.cfg.mode == Mode.TRAIN:
                loss = self.global_loss(result)
                if not torch.isfinite(torch.tensor(loss)):
                    raise NonFiniteError(f"loss is {loss} at training step {index + 1}{self.first_nonfinite_module(index, fp64)}")
                record.losses.append(loss)
                if index == start:
                    record.grads = to_cpu({n: p.grad for n, p in self.bare(model).named_parameters() if p.grad is not None})
            elif index == start:
                if self.cfg.mode == Mode.GENERATE:
                    record.tokens = result.detach().to("cpu")
                else:
                    self.check_finite(flatten(result), f"step {index + 1}", index, fp64)
            if primary:
                self.after_primary_step(index, seconds, model, opt)
        return record, opt

    def bare(self, model: Any) -> Any:
        """The workload's own module inside DDP and torch.compile: its parameter names and state dict are the plain
        single-process ones (a compiled wrapper's state dict keys carry ``_orig_mod.``, which a plain model rejects)."""
        if self.world > 1:
            model = getattr(model, "module", model)
        return getattr(model, "_orig_mod", model)

    def global_loss(self, loss: Any) -> float:
        """The loss of the whole batch: each rank's shard loss averaged over ranks (equal shards)."""
        loss = loss.detach().float()
        if self.world > 1:
            import torch.distributed as dist

            loss = loss.clone()
            dist.all_reduce(loss)  # SUM: every backend has it (gloo has no AVG)
            loss /= self.world
        return float(loss.item())

    def after_primary_step(self, index: int, seconds: float, model: Any, opt: Any) -> None:
        now = time.time() - self.t0 - self.excluded_s
        if index == 0:
            self.timing["first_call_s"] = seconds
            self.timing["cold_start_s"] = now
            self.channel.progress(f"first result after {now:.1f} s (first call {seconds * 1e3:.0f} ms)")
        if (self.job["role"] == "target" and self.rank == 0 and self.cfg.mode == Mode.TRAIN
                and index + 1 == self.cfg.resume_step):
            t = time.perf_counter()
            self.save_resume(self.bare(model), opt, index + 1)
            self.excluded_s += time.perf_counter() - t
        if index + 1 == self.cfg.steps:
            self.timing["time_to_n_s"] = now

    def probe(self, fp64: bool = False, model: Any = None, index: int = 0) -> ProbeCapture:
        """A hooked forward pass on step ``index``'s batch: per-module outputs in execution order."""
        def forward(model: Any) -> Any:
            batch = self.batch(index, fp64)
            self.seed_step(index)
            with self.no_grad(), self.autocast(fp64):
                return self.workload.forward(model, batch)

        output, modules = case.probe_modules(model if model is not None else self.fresh(fp64), forward)
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

    # -- checkpoints ---------------------------------------------------------------------
    def rng_state(self) -> dict:
        module = self.devices.device_module(self.device)
        state = {"cpu": self.torch.get_rng_state()}
        if self.device.type != "cpu" and hasattr(module, "get_rng_state"):
            state["device"] = module.get_rng_state()
        return state

    def save_resume(self, model: Any, opt: Any, step: int) -> None:
        path = self.outdir / "resume" / "checkpoint.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "rng": self.rng_state()}, path)

    def resume(self) -> dict:
        """Fresh process: load the mid-training checkpoint on the target and finish the run."""
        ckpt = self.torch.load(self.outdir / "resume" / "checkpoint.pt", map_location=self.device, weights_only=True)
        model = self.fresh()
        model.load_state_dict(ckpt["model"])
        opt = self.optimizer(model)
        opt.load_state_dict(ckpt["optimizer"])
        self.torch.set_rng_state(ckpt["rng"]["cpu"].cpu())  # map_location moved it to the device
        module = self.devices.device_module(self.device)
        if "device" in ckpt["rng"] and hasattr(module, "set_rng_state"):
            module.set_rng_state(ckpt["rng"]["device"].cpu())
        return {"step": ckpt["step"], "losses": self.run(model, start=ckpt["step"], opt=opt)[0].losses}

    def save_exit(self, model: Any, opt: Any) -> dict:
        """Save what the target produced in the standard formats, as a user would, no `.cpu()` first."""
        exit_dir = self.outdir / "exit"
        exit_dir.mkdir(parents=True, exist_ok=True)
        saved: dict[str, Any] = {}

        def attempt(name: str, path: Path, save) -> None:
            try:
                save(model, path)
                saved[name] = {"path": str(path)}
            except Exception as exc:  # a format that cannot be saved from this device is a finding
                if disk_full(exc, path.parent):
                    raise  # not a finding: the run cannot go on (reported as the output error it is)
                saved[name] = {"path": str(path), "error": f"{type(exc).__name__}: {exc}", "fix": self.save_fix(name, save, path)}

        attempt("torch.save state dict", exit_dir / "state_dict.pt", lambda m, p: self.torch.save(m.state_dict(), p))

        def save_safetensors(m: Any, p: Path) -> None:
            from safetensors.torch import save_model

            save_model(m, str(p))

        attempt("safetensors", exit_dir / "model.safetensors", save_safetensors)
        if hasattr(model, "save_pretrained"):
            attempt("save_pretrained", exit_dir / "pretrained", lambda m, p: m.save_pretrained(str(p)))
        if opt is not None:
            attempt("optimizer state", exit_dir / "optimizer.pt", lambda m, p: self.torch.save(opt.state_dict(), p))
        if hasattr(model, "config") and hasattr(model.config, "to_json_file"):
            model.config.to_json_file(str(exit_dir / "config.json"))  # the architecture, for the state-dict formats
        eval_batch = self.workload.batch("cpu", self.cfg.eval_seed)
        self.torch.save(eval_batch, exit_dir / "eval_batch.pt")
        return saved

    def save_fix(self, name: str, save: Any, path: Path) -> str:
        """The fix for a format that could not be saved: named from the cause, checked against a CPU copy."""
        extra = [k for k, v in self.pristine.state_dict().items()
                 if k.endswith("_extra_state") and not isinstance(v, self.torch.Tensor)]
        if extra and name == "safetensors":
            return (f"{', '.join(extra)} holds a non-tensor value (the module's get_extra_state()); safetensors "
                    "stores tensors only, on any device. Make get_extra_state() return tensors (or nothing), or "
                    "use torch.save for this model")
        try:
            save(copy.deepcopy(self.pristine), path.with_name(f"cpu-probe-{path.name}"))
        except Exception as exc:
            return f"{name} fails on the CPU too ({type(exc).__name__}): the model itself cannot be saved this way"
        return f"{name} cannot be written from the target device; save a .cpu() copy"

    def architecture(self) -> dict:
        """How a process without torchferry rebuilds this model, and which class's loader reads save_pretrained."""
        import importlib.util

        model = self.pristine
        transformers = sys.modules.get("transformers")
        loader = {"module": type(model).__module__, "class": type(model).__qualname__}
        if transformers is not None and isinstance(model, transformers.PreTrainedModel):
            return {"kind": "transformers", "class": type(model).__name__, "pretrained": loader}
        source = dict(self.workload.source)
        if source["kind"] == "module":
            source = {"kind": "file", "path": importlib.util.find_spec(source["module"]).origin, **{
                k: v for k, v in source.items() if k in ("attr", "options", "paths")}}
        return {**source, "pretrained": loader}

    def flops_per_step(self) -> float | None:
        from torch.utils.flop_counter import FlopCounterMode

        model = self.fresh()
        opt = self.optimizer(model) if self.cfg.mode == Mode.TRAIN else None
        counter = FlopCounterMode(display=False)
        with counter:
            self.step(model, opt, 0)
        return float(counter.get_total_flops())

    # -- jobs ----------------------------------------------------------------------------
    def main_job(self) -> dict:
        role, torch = self.job["role"], self.torch
        if role == "resume":
            return {"resume": self.resume()}
        if role == "numerics":
            return self.host_numerics_run()
        compiling = role == "target" and bool(self.cfg.compile)
        window = Window(self.device, self.cfg.compile if compiling else None)  # the timed run's figures
        model = self.model
        if self.world > 1 and self.cfg.mode == Mode.TRAIN:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=None)
        if compiling:
            model = torch.compile(model, backend=self.cfg.compile)
        primary, opt = self.run(model, primary=True)
        self.channel.progress(f"{self.cfg.steps} steps in {self.timing['time_to_n_s']:.1f} s from process start")
        reading = window.read()
        self.timing.update(steps=primary.times, **timing.captured(reading))
        if self.rehearsal is not None:
            self.rehearsal.finish(reading, self.fresh_step)
        self.timing["units_per_step"], self.timing["unit"] = self.units_per_step()
        self.live = (model, opt)
        summary: dict[str, Any] = {"timing": self.timing, "device": str(self.device), "batch_rows": self.batch_rows}
        if self.rank > 0:  # rank 0 speaks for the group; the others only time their share
            return summary
        summary["rng_draws"] = self.rng_draws()
        capture = Capture(run=primary, probe=self.probe())
        if role == "ref":
            self.channel.progress("second reference run (determinism check)")
            again, _ = self.run(self.fresh())
            summary["determinism"] = self.compare_runs(primary, again, self.probe(), capture.probe)
            self.channel.progress("float64 golden run")
            golden, _ = self.run(self.fresh(fp64=True), fp64=True)
            capture.golden = Capture(run=golden, probe=self.probe(fp64=True))
            summary["timing"]["flops_per_step"] = self.flops_per_step()
        else:
            summary["exit"] = {"saved": self.save_exit(self.model, opt), "architecture": self.architecture()}
            # the bare module: a DDP forward may broadcast buffers, a collective rank 0 would wait in alone
            capture.eval_outputs = self.eval_outputs(self.model if self.world > 1 else model)
        capture.save(self.job["tensors"])
        return summary

    def rng_draws(self) -> list[float]:
        """Four uniform draws on this device right after seeding with --seed: the runner compares them across the
        devices, to say when the two generators give other numbers for the same seed (docs/check/parity.md)."""
        self.torch.manual_seed(self.cfg.seed)
        return self.torch.rand(4, device=self.device).cpu().tolist()

    def fresh_step(self) -> Any:
        """Step 1 of a fresh model, untimed (the rehearsal profiles it)."""
        model = self.fresh()
        return self.step(model, self.optimizer(model) if self.cfg.mode == Mode.TRAIN else None, 0)

    def host_numerics_run(self) -> dict:
        """The target's run and probe once more, in a process started with host numerics (64-bit values kept at
        64 bits), so that the runner can tell whether the target's 32-bit narrowing explains a parity failure."""
        from torchferry.device import numerics

        model = self.torch.compile(self.model, backend=self.cfg.compile) if self.cfg.compile else self.model
        run, _ = self.run(model)
        Capture(run=run, probe=self.probe()).save(self.job["tensors"])
        return {"numerics": numerics()}

    def eval_outputs(self, model: Any) -> dict:
        """The trained model's outputs on the eval batch in eval mode, as the exit loader computes them (no dropout)."""
        batch = self.workload.batch(self.device, self.cfg.eval_seed)
        training = model.training
        model.eval()
        try:
            with self.torch.inference_mode(), self.autocast(False):
                return to_cpu({k: v for k, v in flatten(self.workload.forward(model, batch)).items() if floating(v)})
        finally:
            model.train(training)  # the live model goes on with the steady-state steps

    def compare_runs(self, a: RunCapture, b: RunCapture, probe_a: ProbeCapture, probe_b: ProbeCapture) -> dict:
        """Two reference runs must agree bitwise (the dynamo harness's eager_two_runs_differ check)."""
        torch = self.torch
        pairs = [("loss curve", torch.tensor(a.losses), torch.tensor(b.losses))]
        pairs += [(f"output {k}", v, probe_b.outputs[k]) for k, v in probe_a.outputs.items()]
        pairs += [(f"grad {k}", v, b.grads[k]) for k, v in a.grads.items()]
        if a.tokens is not None:
            pairs.append(("tokens", a.tokens, b.tokens))
        for name, x, y in pairs:
            if x.shape != y.shape or not torch.equal(x, y):
                return {"deterministic": False, "first_difference": name}
        return {"deterministic": True, "first_difference": None}

    def steady(self, reps: int, offset: int) -> list[float]:
        """Timed repetitions of one step, for the runner to interleave across devices."""
        model, opt = self.live
        return [self.step(model, opt, self.cfg.steps + offset + i)[0] for i in range(reps)]

    def profile(self, path: str, offset: int) -> dict:
        """A few untimed steps under torch.profiler (--profile), after the steady state; one trace per rank."""
        from torchferry.check import profiling

        model, opt = self.live
        trace = Path(path) if self.world == 1 else Path(path).with_suffix(f".rank{self.rank}.json")
        return profiling.trace(lambda index: self.step(model, opt, index), self.device, trace, self.cfg.steps + offset)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    channel = Channel(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
    os.environ[ROLE_ENV] = job["role"]
    if job["role"] == "numerics":
        os.environ[NUMERICS_ENV] = "host"  # read when the device starts, in setup
    session = Session(job, channel)

    def serve() -> None:
        session.setup()
        channel.send("result", data=session.main_job())
        for command in channel.commands():
            if command["cmd"] == "steady":
                channel.send("steady", times=session.steady(command["reps"], command["offset"]))
            elif command["cmd"] == "profile":
                channel.send("profiled", **session.profile(command["path"], command["offset"]))
        if session.world > 1:
            session.torch.distributed.destroy_process_group()

    outcome = run_case(serve)
    if not outcome.ok:  # report the failure to the runner, then exit non-zero
        with contextlib.suppress(OSError):  # a full disk holds the log too: the event below matters more
            sys.stderr.write(outcome.traceback)  # the whole traceback, torchferry's frames too, in this worker's log
            sys.stderr.flush()
        event = outcome.error_event()
        if outcome.kind != OutputError.slug and disk_full(outcome.exception, session.outdir):
            event.update(kind=OutputError.slug, traceback="")  # torch.save says "unexpected pos" for a full disk
        if event["kind"] == OutputError.slug:
            event["message"] = (f"the disk holding {session.outdir} is full: the {job['role']} worker could not write "
                                f"its files ({event['type']}: {event['message']}). Free space there, or pass an "
                                "--output DIR on a disk with room")
        placement = session.rehearsal.failed(outcome.exception) if session.rehearsal else None
        if placement is not None:  # the user's code mixes devices: a portability failure, not a crash
            event["message"] = (f"portability failure: {placement['op']} at {placement['file']}:{placement['line']} "
                                f"(`{placement['code']}`): {event['message']}")
        channel.send("error", **event, timing=session.timing)
        if channel.world > 1:
            time.sleep(FAILED_RANK_WAIT_S)  # the runner gathers the other ranks' states, then stops the launcher
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
