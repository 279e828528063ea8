"""Coverage cases of one architecture in their own process: ``python -m torchferry.coverage.worker JOB``.

The parent (sweep.py) gives a JSON job: a suite, a method, an architecture and the modes still
to run. This process caps its own address space (RLIMIT_AS), builds the shrunk model once on
the reference device (the suite, torchferry.coverage.suites, says how to build, feed and judge
its family; the method, torchferry.coverage.methods, how big and how many steps) (imports dominate a case's time, so the modes of one
architecture share a process), and for each mode copies it to the target, runs it on both plus
a float64 golden run on the reference, judges with the harness's parity rule
(torchferry.harness.parity) and sends that mode's row before starting the next. The runs step
through the harness's one case runner, as `ferry check`'s do (torchferry.harness.case.ModelCase,
fed the suite's inputs by torchferry.coverage.workload); coverage's own measure (SGD steps, one
repeated batch, the seed set once, results judged here) is its ``StepPlan``. It speaks the
harness's worker protocol: a ``ready`` event once the model is built, then one ``row`` event per
mode. A crash or hang still costs one row: the parent times each mode, kills the process group,
records the mode in progress, and runs the remaining modes in a fresh process.

A worker is warm: once its job's rows are sent it waits on stdin for the parent's next job
(``{"cmd": "job", "job": PATH, "log": PATH}``), so that the next architecture of the sweep
skips the interpreter start and the imports of torch and transformers, which are most of a
tiny row's time. Between two architectures it puts back what a fresh process would have:
Dynamo reset, garbage collected, the device's eager signatures counted as a new process
counts them (``torchferry.device.forget_eager_signatures()``), and its output in the new
job's log. The parent starts a fresh worker after any row that did not end normally
(torchferry.coverage.sweep), and ``TORCHFERRY_COVERAGE_REUSE=0`` runs every architecture in a
process of its own.

``--list-archs PLUGIN...`` prints the model types known once the plugins are imported: the
parent validates architecture names with it, so that plugin code runs only in workers.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from torchferry.coverage import predict
from torchferry.coverage.job import CoverageJob
from torchferry.coverage.results import error_signature
from torchferry.coverage.workload import NEW_TOKENS, SuiteWorkload
from torchferry.errors import DeviceOutOfMemoryError
from torchferry.harness import case as on_device
from torchferry.harness.case import ModelCase, RunCapture, StepPlan, is_host_oom, is_oom
from torchferry.harness.modes import Mode
from torchferry.harness.parity import Tolerance, compare, compare_tokens
from torchferry.harness.protocol import T0_ENV
from torchferry.harness.window import Window, dynamo_graphs
from torchferry.harness.worker import Channel, Outcome, run_case
from torchferry.report.comparison import Comparison, ComparisonStatus, describe
from torchferry.report.coverage import Category, Row

SGD_LR = 1e-2  # train: the optimizer steps' learning rate
REF_WORK = {Mode.FORWARD: "a forward", Mode.GENERATE: "greedy generation", Mode.TRAIN: "a training step"}  # a skip's words
MAX_PARAMS = 60_000_000  # the milder shrink variant must stay small enough to run three copies
SMOKE = (1, 4)  # (batch, length) of the forward that proves a variant runs on the reference


class Skip(Exception):
    """The case cannot be measured for a reason that is not the target device's fault."""


class CompileFailure(Exception):
    """torch.compile (dynamo, AOT or the backend) failed on the target."""


class HostLimit(Exception):
    """This host's memory cannot hold the case: no verdict on the target (the ``host-limit`` category)."""


class Case:
    """One architecture of a job: its model built once on the reference, then each mode's row."""

    def __init__(self, job: CoverageJob) -> None:
        import torch

        from torchferry.coverage import methods, suites

        self.job, self.torch = job, torch
        self.suite = suites.get(job.suite)
        self.method = methods.get(job.method, job.trust_remote_code)
        self.mode = job.modes[0]
        self.first_signature_graphs = 0  # graphs the compiled forward's first input signature compiled
        self.first_call_s: float | None = None  # the target's first call of the mode in progress
        self.row: dict[str, Any] = {}
        self.start_row(self.mode)

    def start_row(self, mode: str) -> None:
        built = {k: self.row[k] for k in ("model_class", "variant", "params", "dtype") if k in self.row}
        self.mode = mode
        self.first_call_s = None
        if self.job.compile:  # a mode that fails before compiling must not show the previous mode's compilations
            _clear_dynamo_compile_seconds()
        self.row = {**self.job.base(mode), **built}

    # -- setup -------------------------------------------------------------------------
    def setup(self) -> None:
        from torchferry.harness import devices

        for plugin in self.job.plugins:
            _import_plugin(plugin)
        self.suite.architectures()  # imports the suite's library here, so that a row's `setup` phase holds it
        self.ref = devices.resolve(self.job.ref)
        self.target = devices.resolve(self.job.target)

    def build(self) -> None:
        """The first shrink variant that builds and runs a forward on the reference device."""
        from torchferry.coverage.configs import run_dtype
        from torchferry.coverage.suites.base import Unsupported
        from torchferry.workloads.model_source import RemoteCodeRefused

        torch, spec = self.torch, self.job.spec
        try:
            candidates = self.suite.variants(spec, self.method)
        except RemoteCodeRefused as exc:
            raise Skip(str(exc)) from exc
        except Exception as exc:  # an unknown type, or a config that needs files/extra packages
            raise Skip(f"cannot build the config: {error_signature(exc)}") from exc
        problems = []
        for name, cfg in candidates:
            dtype = run_dtype(cfg, self.method)
            limit = self.param_limit(dtype)
            try:
                with torch.device("meta"):
                    meta = self.suite.build(spec, cfg, self.method)
                params = sum(p.numel() for p in meta.parameters())
                if params > limit and self.method.copies:
                    need = params * self.method.copies * dtype.itemsize / 2**30
                    raise HostLimit(f"{params / 1e6:.0f}M parameters in {str(dtype).removeprefix('torch.')}: "
                                    f"{self.method.copies} copies need {need:.1f} GiB, over --memory-gb "
                                    f"{self.job.memory_limit_gib:g} (this host's limit)")
                if params > limit:
                    problems.append(f"{name}: {params / 1e6:.0f}M parameters after shrinking (limit {limit / 1e6:.0f}M)")
                    continue
                torch.manual_seed(self.job.seed)
                model = self.suite.build(spec, cfg, self.method).eval()
                self.suite.check_inputs(model)
                with torch.no_grad():
                    model(**self.suite.inputs(model, *SMOKE, self.job.seed, self.method))
            except Unsupported as exc:
                raise Skip(f"not measured by the {self.suite.name} suite: {exc}") from exc
            except HostLimit:
                raise
            except Exception as exc:
                if is_oom(exc):
                    raise
                problems.append(f"{name}: {error_signature(exc)}")
                continue
            self.model, self.variant = model, name
            self.row.update(model_class=type(model).__name__, variant=name, params=params,
                            dtype=str(dtype).removeprefix("torch."))
            return
        raise Skip("no shrunk config builds and runs on the reference: " + " | ".join(problems))

    def param_limit(self, dtype: Any) -> int:
        """Parameters a case may have: fixed for tiny methods; at full width, what ``--memory-gb`` holds in the dtype
        the case runs in (the method's copies of every parameter, at ``dtype``'s bytes each)."""
        if not self.method.copies:
            return MAX_PARAMS
        return int(self.job.memory_limit_gib * 2**30 / (self.method.copies * dtype.itemsize))

    # -- modes: the harness's one case runner, as coverage parameterises it -------------------
    def plan(self) -> StepPlan:
        """How the mode in progress steps (torchferry.harness.case.StepPlan): every forward input signature once;
        ``optimizer_steps`` SGD steps on one repeated batch, or one forward and backward when 0; one greedy
        generation. Seeded once per run, under ``torch.no_grad``, judged here."""
        mode = Mode(self.mode)
        steps = {Mode.FORWARD: len(self.shapes()), Mode.TRAIN: max(1, self.method.optimizer_steps), Mode.GENERATE: 1}
        return StepPlan(mode=mode, seed=self.job.seed, steps=steps[mode], lr=SGD_LR, new_tokens=NEW_TOKENS,
                        optimizer="sgd" if self.method.optimizer_steps else None, seed_each_step=False,
                        same_batch=mode == Mode.TRAIN, inference_mode=False, in_process=True)

    def shapes(self) -> list[tuple[int, int]]:
        """One (batch, length) per forward input signature (two under --compile: the recompile check); train's one."""
        if self.mode == Mode.FORWARD:
            return self.suite.shapes(self.method.batch, self.method.seq, bool(self.job.compile))
        return [(self.method.batch, self.method.seq)]

    def cases(self, plan: StepPlan) -> tuple[ModelCase, ModelCase]:
        """The built model on the reference and on the target, fed as the suite feeds it."""
        workload = SuiteWorkload(self.suite, self.model, self.method, loss_seed=self.job.seed + 7,
                                 shapes={self.job.seed + i: s for i, s in enumerate(self.shapes())},
                                 prompt=plan.mode == Mode.GENERATE, compiled=bool(self.job.compile))
        return ModelCase(workload, self.ref, plan), ModelCase(workload, self.target, plan)

    @staticmethod
    def fresh(case: ModelCase, fp64: bool = False) -> Any:
        """A fresh copy; in train mode with dropout as the config has it (every run draws the same masks: each is
        seeded alike). The model is built in eval mode."""
        model = case.fresh(fp64)
        return model.train() if case.plan.mode == Mode.TRAIN else model

    def compiled(self, model: Any) -> Any:
        """``model`` (or its ``forward``) compiled with --compile's backend, from a reset Dynamo."""
        if not self.job.compile:
            return model
        import torch._dynamo

        torch._dynamo.reset()
        return self.torch.compile(model, backend=self.job.compile)

    def on_ref(self, case: ModelCase) -> RunCapture:
        """The reference's run; its failure is a skip (not the target's fault), its OOM the OOM rule's."""
        try:
            return case.run(self.fresh(case))[0]
        except Exception as exc:
            if is_oom(exc):
                raise
            raise Skip(f"the reference ({self.job.ref}) fails {REF_WORK[case.plan.mode]}: {error_signature(exc)}") from exc

    def on_target(self, case: ModelCase) -> RunCapture:
        """The target's run, compiled under --compile (generate compiles the model's forward); a failure inside
        torch.compile is a compile failure. Its first step's time and graphs are the row's."""
        model = self.fresh(case)
        if self.job.compile and case.plan.mode == Mode.GENERATE:
            model.forward = self.compiled(model.forward)
        elif self.job.compile:
            model = self.compiled(model)
        graphs0 = dynamo_graphs() if self.job.compile else 0

        def first_step(index: int, seconds: float, _model: Any, _opt: Any) -> None:
            if index == 0:
                self.first_call_s = round(seconds, 3)
                self.first_signature_graphs = dynamo_graphs() - graphs0 if self.job.compile else 0

        start = time.perf_counter()
        try:
            return case.run(model, after_step=first_step)[0]
        except Exception as exc:
            if is_oom(exc):
                raise
            if self.job.compile and on_device.is_compile_error(exc):
                raise CompileFailure(error_signature(exc)) from exc
            raise
        finally:
            if self.first_call_s is None:  # it failed before its first step ended
                self.first_call_s = round(time.perf_counter() - start, 3)

    def golden(self, case: ModelCase) -> RunCapture | None:
        """The float64 run on the reference, or None when the method has none or the model no fp64 path (the rule then
        falls back to allclose)."""
        if not self.method.golden:
            return None
        try:
            return case.run(self.fresh(case, fp64=True), fp64=True)[0]
        except Exception:
            return None

    def forward(self) -> tuple[list, int]:
        ref_case, target_case = self.cases(self.plan())
        out, shapes = self.suite.output, self.shapes()
        ref_run = self.on_ref(ref_case)
        try:  # an output the suite cannot read (no logits) is the reference's failure too, not the target's
            ref = [out(o) for o in ref_run.outputs]
        except Exception as exc:
            raise Skip(f"the reference ({self.job.ref}) fails {REF_WORK[Mode.FORWARD]}: {error_signature(exc)}") from exc
        target, golden = self.on_target(target_case), self.golden(ref_case)
        comps = [self._compare(f"{self.suite.output_name} {tuple(shape)}", ref[i], out(target.outputs[i]),
                               out(golden.outputs[i]) if golden is not None else None) for i, shape in enumerate(shapes)]
        return comps, len(shapes)

    def generate(self) -> tuple[list, int]:
        torch = self.torch
        plan = self.plan()
        ref_case, target_case = self.cases(plan)
        cache = "static" if on_device.static_cache(self.model) else "dynamic"
        ref: RunCapture | None = None
        if cache == "static":
            try:
                ref = ref_case.run(self.fresh(ref_case))[0]
            except Exception:
                cache = "dynamic (static cache failed on the reference)"
                ref_case, target_case = self.cases(replace(plan, static_cache=False))
        if ref is None:
            ref = self.on_ref(ref_case)
        self.row["cache"] = cache
        out_ref, out_t, golden = ref.outputs[0], self.on_target(target_case).outputs[0], self.golden(ref_case)
        out_g = golden.outputs[0] if golden is not None else None
        tok_r, tok_t = out_ref.sequences.cpu(), out_t.sequences.cpu()
        scores_r, scores_t = torch.stack(out_ref.scores), torch.stack([s.cpu() for s in out_t.scores])
        scores_g = torch.stack(out_g.scores) if out_g is not None else None
        comps = [self._compare("step logits", scores_r, scores_t, scores_g if scores_g is not None and
                               out_g.sequences.shape == tok_r.shape and torch.equal(out_g.sequences, tok_r) else None)]
        tokens, details = compare_tokens(tok_r, tok_t, out_g.sequences if out_g is not None else None)
        if not details["match"]:  # equal tokens add nothing the step logits don't already say
            comps.append(tokens)
            self.row["tokens"] = {key: details[key] for key in ("ref", "target", "first_mismatch", "near_tie")}
        return comps, 1

    def train(self) -> tuple[list, int]:
        """The steps' losses and the first step's gradients, parameter by parameter (each streamed by the rule)."""
        ref_case, target_case = self.cases(self.plan())
        ref, target, golden = self.on_ref(ref_case), self.on_target(target_case), self.golden(ref_case)
        stack = self.torch.stack
        comps = [self._compare("loss", stack(ref.outputs), stack(target.outputs),
                               stack(golden.outputs) if golden is not None else None)]
        for name, grad in ref.grads.items():
            if name not in target.grads:
                comps.append(Comparison(f"grad {name}", False, ComparisonStatus.MISSING))
                continue
            comps.append(self._compare(f"grad {name}", grad, target.grads[name],
                                       golden.grads.get(name) if golden is not None else None))
        return comps, 1

    def _compare(self, name: str, ref: Any, target: Any, golden: Any | None) -> Any:
        dtype = self.row.get("dtype") or "float32"
        tolerance = Tolerance.resolve(Mode(self.mode), "float32" if dtype in ("float32", "float64") else "bfloat16",
                                      self.job.tol)
        # both sides judged in one dtype (a float32 result of a 16-bit model stays itself); the rule streams them
        if ref.dtype != target.dtype:
            ref, target = ref.float(), target.float()
        return compare(name, ref.detach(), target.detach(), golden.detach() if golden is not None else None,
                       tolerance.tol, low_precision=tolerance.low_precision)

    # -- the row -----------------------------------------------------------------------
    def run(self) -> dict:
        window = Window(self.target, self.job.compile)  # what the row measures and predicts for the target
        comps, signatures = getattr(self, self.mode)()
        reading = window.read()
        fallback = dict(reading.ops.fallback) if reading.ops is not None else {}
        failed = [c for c in comps if not c.passed]
        self.row.update(checks=len(comps), failed_checks=len(failed), fallback_ops=fallback, **predict.fields(reading))
        if self.job.compile:
            self.row.update(signatures=signatures)
        if failed:
            c = failed[0]
            more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
            return self._row(Category.FAIL_PARITY, f"{c.name}: {describe(c)}{more}")
        if fallback:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(fallback.items(), key=lambda kv: -kv[1]))
            share = f" ({reading.ops.fallback_calls} of {reading.ops.executed} op calls, {reading.ops.fallback_share:.1%})"
            return self._row(Category.FAIL_FALLBACK, f"host fallback: {ops}{share}")
        graphs = self.row.get("graphs") or 0
        if self.mode == "forward" and self.job.compile and predict.recompiles(graphs, self.first_signature_graphs,
                                                                                     signatures):
            return self._row(Category.FAIL_RECOMPILE, f"{graphs} graphs for {signatures} input signatures "
                             f"({self.first_signature_graphs} for the first)")
        return self._row(Category.PASS, f"{len(comps)} checks within tolerance")

    def phases(self) -> dict[str, float | None]:
        """The mode's own phases (Row.phases): its first target call (the run's first step), and with --compile the
        compilations."""
        own: dict[str, float | None] = {"first_call": self.first_call_s}
        if self.job.compile:
            own["compile"] = round(_dynamo_compile_seconds(), 3)
        return own

    def _row(self, category: Category, reason: str) -> dict:
        self.row.update(category=category, reason=reason)
        return self.row


def _dynamo_compile_seconds() -> float:
    """Seconds Dynamo spent compiling frames (backend included) since the mode's row started
    (``Case.start_row`` clears them)."""
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("_compile.compile_inner", ())))


def _clear_dynamo_compile_seconds() -> None:
    from torch._dynamo.utils import compilation_time_metrics

    compilation_time_metrics.pop("_compile.compile_inner", None)


def _import_plugin(path: str) -> None:
    """Import a file that registers custom architectures (AutoConfig/AutoModelForCausalLM.register)."""
    import importlib.util

    name = "ferry_coverage_plugin_" + Path(path).stem
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _limit_memory(gib: float | None) -> None:
    if gib:
        limit = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _set_threads(threads: int) -> None:
    """The worker process's intra-op threads. Set once for the process, never by a Case: a Case run
    inside another process (the tests) must leave that process's threads alone, since the autograd
    engine's device thread keeps the count it started with and a change makes CPU and device
    backward passes reduce in different orders."""
    import torch

    torch.set_num_threads(max(1, int(threads)))


def row_of(outcome: Outcome, base: dict) -> Row:
    """The typed row of one mode's outcome: its own row, or its failure as a category (never a traceback to parse).
    A field a row does not have fails here, in the worker that measured it, not in the parent that reads it."""
    if outcome.ok:
        row = outcome.value
    elif isinstance(outcome.exception, Skip):
        row = {**base, "category": Category.SKIPPED, "reason": outcome.message}
    elif isinstance(outcome.exception, CompileFailure):
        row = {**base, "category": Category.FAIL_COMPILE, "reason": outcome.message}
    elif isinstance(outcome.exception, HostLimit):
        row = {**base, "category": Category.HOST_LIMIT, "reason": outcome.message}
    elif outcome.kind == DeviceOutOfMemoryError.slug or (is_oom(outcome.exception) and not is_host_oom(outcome.exception)):
        row = {**base, "category": Category.OOM, "reason": error_signature(outcome.exception)}
    elif is_oom(outcome.exception):
        row = {**base, "category": Category.HOST_LIMIT,
               "reason": f"this host's memory ran out (--memory-gb): {error_signature(outcome.exception)}"}
    else:
        row = {**base, "category": Category.ERROR, "reason": error_signature(outcome.exception),
               "traceback": outcome.traceback[-4000:]}
    return Row(**{**row, "case_s": round(outcome.seconds, 3)})


def list_archs(plugins: list[str]) -> list[str]:
    """Model types transformers knows once ``plugins`` are imported (in this worker, never in the parent)."""
    from transformers import CONFIG_MAPPING

    for plugin in plugins:
        _import_plugin(plugin)
    return sorted(CONFIG_MAPPING.keys())


def main(argv: list[str]) -> int:
    started = time.time()
    channel = Channel()
    if argv[0] == "--list-archs":
        outcome = run_case(lambda: list_archs(argv[1:]))
        channel.send("result", data=outcome.value) if outcome.ok else channel.send("error", **outcome.error_event())
        return 0
    job = _load(argv[0])
    _limit_memory(job.memory_gib)  # one sweep's jobs share the limit and the threads: set once per process
    _set_threads(job.threads)
    run_job(channel, job, start_s=started - float(os.environ.get(T0_ENV, started)))
    for command in channel.commands():  # warm: the parent's next architecture, until it says quit
        _log_to(Path(command["log"]))
        _fresh_state()
        run_job(channel, _load(command["job"]), start_s=0.0)
    return 0


def run_job(channel: Channel, job: CoverageJob, start_s: float) -> None:
    """Build the job's architecture, then send one row per mode (the first carries the start and build phases)."""
    case: Case | None = None
    phases = {"start": round(start_s, 3)}

    def prepare() -> None:
        nonlocal case
        clock = time.perf_counter()
        case = Case(job)
        case.setup()
        phases["setup"] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()
        case.build()
        phases["build"] = round(time.perf_counter() - clock, 3)

    built = run_case(prepare)
    if not built.ok:  # the architecture cannot run at all: every mode gets the same row
        for mode in job.modes:
            base = {**case.row, "mode": mode} if case else job.base(mode)
            channel.send("row", row=row_of(built, {**base, "phases": phases}).to_dict())
        return
    channel.send("ready")  # the parent's per-mode clock starts here, after imports and the build
    for i, mode in enumerate(job.modes):
        case.start_row(mode)
        row = row_of(run_case(case.run), case.row)
        channel.send("row", row=replace(row, phases={**(phases if i == 0 else {}), **case.phases()}).to_dict())


def _load(path: str) -> CoverageJob:
    return CoverageJob.from_dict(json.loads(Path(path).read_text()))


def _log_to(path: Path) -> None:
    """Point this process's output (fds 1 and 2; the protocol stream is its own fd) at ``path``."""
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)


def _fresh_state() -> None:
    """What a fresh process would start the next architecture with, of the state one architecture leaves.

    Parameters, inputs and RNG are the job's own (each build and mode seeds itself); Dynamo's caches,
    unreachable cycles and the device's seen eager signatures are not."""
    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    device = sys.modules.get("torchferry.device")
    if device is not None and device.is_enabled():
        device.forget_eager_signatures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
