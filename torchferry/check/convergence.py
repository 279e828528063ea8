"""The parity result of an unchanged script: its runs compared step by step, within its reference's own rounding noise.

A script has no fp64 golden run and no batches of torchferry's own (the workload rule,
check/parity.py, needs both), so what its recorders (check/script/recorder.py) see of each run is
compared instead: every loss and gradient norm, the final parameters of every optimizer that
stepped (tensor by tensor), and each module's output and each parameter's gradient at the first
forward and backward (``ModuleTrace``: a digest and a small summary per module, bounded memory).
docs/check/parity.md, "Unchanged scripts", states the rule and its anchors:

- **exact** where both sides run the same kernels on the same shapes and draw the same random
  numbers (the built-in device against the CPU, one random stream): every figure equal, every
  digest equal;
- **noise** otherwise: the reference runs a second time with every parameter moved by one unit in
  the last place (``perturb``) before training starts, every seed kept: that run's distance from
  the first is the reference's own rounding noise, and its growth over the steps. The target
  passes a figure when its distance to the reference is at most ``NOISE_MULTIPLE`` times that
  noise (its running maximum up to the step, so that a crossing of the two curves allows nothing
  less), and never less than PyTorch's own tolerance for the lowest precision the reference computed
  in (``Floor``: float32's, or bfloat16's or float16's under autocast or a half-precision model) or
  the ``--tol`` the user gave.

A parity failure names the first divergent module in execution order (the reference's), with its
class's file and line: where the two runs first differ beyond the rule.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torchferry.harness.parity import Tolerance
from torchferry.records import Record
from torchferry.report.check import ParityResult, ParityStatus
from torchferry.report.comparison import FINAL_BUFFER, Comparison, ComparisonStatus

NOISE_MULTIPLE = 10.0  # a figure passes within this many times the reference's own rounding noise
FLOOR_RTOL, FLOOR_ATOL = 1.3e-6, 1e-5  # torch.testing.assert_close's float32 defaults: never less than these
# assert_close's defaults for the half precisions: the floor of a run whose reference computed in one of them
HALF_FLOORS = {"bfloat16": (1.6e-2, 1e-5), "float16": (1e-3, 1e-5)}
SUMMARY_CHUNKS = 16  # a module output's summary: its mean |x|, max |x| and the means of this many contiguous chunks
MAX_MODULES = 4096  # module outputs kept at the first forward (a model with more is traced in part, and says so)


# -- records ---------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FinalParameters(Record):
    """The final parameters of one optimizer that stepped in a script, or the floating-point buffers of the models it
    ran: each tensor's digest (and name, where the recorder found the module that owns it)."""

    count: int
    numel: int
    digests: list[str]
    names: list[str] | None = None

    @classmethod
    def of(cls, params: list, names: list[str] | None = None) -> FinalParameters:
        from torchferry.harness.portable import digest

        return cls(count=len(params), numel=sum(int(p.numel()) for p in params), digests=[digest(p) for p in params],
                   names=names)


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """One tensor in a few numbers: its digest (equal digests: equal values), size, and ``values`` (mean |x|, max |x|,
    then the means of ``SUMMARY_CHUNKS`` contiguous chunks), what the noise rule compares."""

    name: str
    digest: str
    numel: int
    values: list[float]
    module_class: str | None = None  # the module's class
    where: str | None = None  # the class's file and line
    dtype: str | None = None  # the tensor's dtype ("bfloat16"): the precision the module computed in

    @classmethod
    def of(cls, name: str, tensor: Any, **about: Any) -> Summary:
        import torch

        from torchferry.harness.portable import digest

        x = tensor.detach().to("cpu", torch.float64).reshape(-1)
        dtype = str(tensor.dtype).removeprefix("torch.")
        if not x.numel():
            return cls(name=name, digest=digest(tensor), numel=0, values=[], dtype=dtype, **about)
        chunks = [float(c.mean()) if c.numel() else 0.0 for c in torch.tensor_split(x, SUMMARY_CHUNKS)]
        absolute = x.abs()
        return cls(name=name, digest=digest(tensor), numel=int(x.numel()),
                   values=[float(absolute.mean()), float(absolute.max()), *chunks], dtype=dtype, **about)

    def distance(self, other: Summary) -> float:
        """How far ``other`` is from this one, relative to this one's mean magnitude (inf: another size)."""
        if self.numel != other.numel or len(self.values) != len(other.values):
            return math.inf
        if not self.values:
            return 0.0
        scale = self.values[0] or 1.0
        return max(abs(a - b) for a, b in zip(self.values, other.values)) / scale


@dataclass(kw_only=True)
class ModuleTrace(Record):
    """Each module's first floating output at the first forward, in execution order, and each parameter's gradient
    after the first backward (a parameter without a gradient has an empty summary)."""

    forward: list[Summary] = field(default_factory=list)
    grads: list[Summary] = field(default_factory=list)
    partial: bool = False  # more modules ran than MAX_MODULES


@dataclass(frozen=True, kw_only=True)
class Curves(Record):
    """What parity reads of one script run: its losses, gradient norms, optimizer steps, final parameters and trace."""

    losses: list[float]
    grad_norms: list[float | None]
    steps: int
    parameters: list[FinalParameters]
    buffers: FinalParameters | None = None  # the models' floating-point buffers at the end
    tensors: str | None = None  # the final tensors ({"parameters": one list per optimizer, "buffers": one list}), kept
    shapes: list[list] | None = None  # the tensors the first backward's graph saved: [node, attribute, shape]
    dtypes: list[str] | None = None  # the floating dtypes of every tensor the first backward's graph saved
    forwards: int = 0  # an inference script's calls of its model (it never called backward)
    modules: ModuleTrace | None = None


# -- capture (the recorders, in the user's process) ----------------------------------------------------
class ModuleTracer:
    """Summarises each module's first floating output from the first forward on, until ``finish`` (the first
    backward), through PyTorch's global forward hook; ``excluded`` wraps the summaries' own device work."""

    def __init__(self, excluded: Callable[[], Any]) -> None:
        from torch.nn.modules.module import register_module_forward_hook

        self.excluded = excluded
        self.outputs: dict[int, tuple[Any, Summary]] = {}  # id(module) -> (module, its output), in execution order
        self.inputs: dict[int, dict[str, list[int]]] = {}  # id(module) -> the shapes of its tensor inputs
        self.partial = False
        self.locations: dict[type, str | None] = {}  # each traced module class's file and line
        self.handle = register_module_forward_hook(self._hook)

    def _hook(self, module: Any, inputs: Any, output: Any) -> None:
        if id(module) in self.outputs or is_compiling():
            return  # seen; or traced by dynamo into a compiled graph, which a summary would break (and change)
        if len(self.outputs) >= MAX_MODULES:
            self.partial = True
            return
        from torchferry.harness.case import floating
        from torchferry.harness.portable import flatten

        tensor = next((t for t in flatten(output).values() if floating(t)), None) if output is not None else None
        if tensor is not None:
            with self.excluded():
                self.outputs[id(module)] = (module, Summary.of("", tensor))
            self.inputs[id(module)] = input_shapes(inputs)
            if type(module) not in self.locations:  # now: at exit (an inference script's end) inspect finds no source
                self.locations[type(module)] = class_location(type(module))

    def roots(self) -> list[Any]:
        """The traced modules no other traced module holds: the models (and losses) the script called."""
        modules = [m for m, _ in self.outputs.values()]
        held = {id(inner) for m in modules for inner in m.modules() if inner is not m}
        return [m for m in modules if id(m) not in held]

    def names(self) -> dict[int, str]:
        """Each traced module's path: from its model's root (a module no other traced module holds), the root named
        by its class when several ran (a GAN's generator and discriminator), and numbered when several roots share a
        class (Hugging Face's hub kernels wrap functions as modules called ``Func``: one name for three modules paired
        each with another's output)."""
        roots = self.roots()
        classes = Counter(type(root).__name__ for root in roots)
        seen: Counter[str] = Counter()
        found: dict[int, str] = {}
        for root in roots:
            cls = type(root).__name__
            seen[cls] += 1  # roots of one class (three functions wrapped as modules) numbered in the order they ran
            prefix = (cls if classes[cls] == 1 else f"{cls}#{seen[cls]}") if len(roots) > 1 else ""
            for name, module in root.named_modules():
                path = ".".join(filter(None, [prefix, name])) or "<model>"
                found.setdefault(id(module), path)
        return found

    def parameter_names(self) -> dict[int, str]:
        """id(parameter) -> its path, for every parameter of a traced model."""
        names, found = self.names(), {}
        for module, _ in self.outputs.values():
            for pname, p in module.named_parameters(recurse=False):
                found.setdefault(id(p), f"{names[id(module)]}.{pname}" if names[id(module)] != "<model>" else pname)
        return found

    def finish(self) -> ModuleTrace:
        """Stop tracing; the outputs by name and the parameters' gradients (call after the first backward)."""
        self.handle.remove()
        names = self.names()
        trace = ModuleTrace(partial=self.partial)
        with self.excluded():
            for module, summary in self.outputs.values():
                about = {"module_class": type(module).__qualname__, "where": self.locations.get(type(module))}
                name = names.get(id(module), type(module).__name__)
                trace.forward.append(Summary(name=name, digest=summary.digest, numel=summary.numel,
                                             values=summary.values, dtype=summary.dtype, **about))
                for pname, p in module.named_parameters(recurse=False):
                    full = f"{name}.{pname}" if name != "<model>" else pname
                    trace.grads.append(Summary.of(full, p.grad, **about) if p.grad is not None
                                       else Summary(name=full, digest="", numel=0, values=[], **about))
        return trace


def model_buffers(params: list[Any]) -> tuple[list[Any], list[str]]:
    """The floating-point buffers of the models that own ``params`` (the parameters the optimizers stepped), each named
    by its path and its module's class: the state a model changes in place outside the optimizer (a BatchNorm's
    running statistics), which the final parameters miss and an evaluation or a checkpoint reads.

    The models are found among the modules the garbage collector tracks, once, at the end of the run: the module
    tracer sees only what ran before the first backward (a GAN's generator first runs after its discriminator's
    backward). A model is a module holding one of ``params`` that no other module holds; the models come in the order
    of their first stepped parameter and their buffers in PyTorch's order, so that two runs of a script line up."""
    import gc

    from torch import nn

    from torchferry.harness.case import floating

    order = {id(p): i for i, p in enumerate(params)}
    # type(), not isinstance(): isinstance reads __class__, which a lazy proxy answers with side effects
    modules = [o for o in gc.get_objects() if issubclass(type(o), nn.Module)]
    held = {id(child) for m in modules for child in m.children()}
    models = []
    for m in modules:
        first = min((order[id(p)] for p in m.parameters() if id(p) in order), default=None) \
            if id(m) not in held else None
        if first is not None:
            models.append((first, m))
    models.sort(key=lambda item: item[0])
    seen, tensors, names = set(), [], []
    for _, model in models:
        prefix = f"{type(model).__name__}." if len(models) > 1 else ""
        owners = dict(model.named_modules())
        for path, b in model.named_buffers():
            if id(b) in seen or not floating(b):
                continue
            seen.add(id(b))
            owner, _, _ = path.rpartition(".")
            tensors.append(b)
            names.append(f"{prefix}{path} ({type(owners[owner]).__name__})")
    return tensors, names


def is_compiling() -> bool:
    """Whether dynamo is tracing this call into a compiled graph (``torch.compile(model)``): the recorders' global
    module hooks then do nothing, so that the script's graphs are the ones it compiles without torchferry."""
    import torch

    return torch.compiler.is_compiling()


def input_shapes(inputs: Any) -> dict[str, list[int]]:
    """The shapes of a call's tensor arguments, by position: what a new batch shape changes."""
    return {str(i): list(x.shape) for i, x in enumerate(inputs if isinstance(inputs, tuple) else (inputs,))
            if hasattr(x, "shape") and hasattr(x, "dtype")}


def class_location(cls: type) -> str | None:
    """``file:line`` of a class's definition, where Python can tell."""
    import inspect

    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return None


def perturb(params: list) -> None:
    """Move every parameter by one unit in the last place (towards +inf): the noise run's one change."""
    import torch

    with torch.no_grad():
        for p in params:
            if p.is_floating_point():
                p.copy_(torch.nextafter(p, torch.full_like(p, math.inf)))


# -- judge (the parent) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Floor:
    """The least a figure is allowed to move, whatever the noise run says: torch.testing.assert_close's default
    tolerance for the lowest precision the reference computed in, or ``--tol``. A script under bfloat16 autocast
    rounds each module's output to 8 bits of mantissa, where the target may keep float32 (TorchNeuron's autocast runs
    layer_norm in float32, the CPU's in bfloat16); moving every float32 parameter by one ulp, the noise run, barely
    moves such a run, so without this floor a difference of one bfloat16 rounding would fail it."""

    rtol: float = FLOOR_RTOL
    atol: float = FLOOR_ATOL
    tol: float | None = None  # --tol, relative: tol x max(1, |ref|)
    precision: str = "float32"

    @classmethod
    def of(cls, ref: Curves, tol: float | None) -> Floor:
        """The floor of a run whose reference is ``ref``: the lowest precision among its first forward's module outputs
        and the tensors its first backward's graph saved (a compiled model's module outputs are not traced, its graph's
        saved activations are). The reference's, not the target's: a target that computes in less precision than the
        reference is what parity must see."""
        seen = {s.dtype for s in ref.modules.forward} if ref.modules is not None else set()
        seen.update(ref.dtypes or ())
        precision = next((p for p in HALF_FLOORS if p in seen), "float32")
        rtol, atol = HALF_FLOORS.get(precision, (FLOOR_RTOL, FLOOR_ATOL))
        return cls(rtol, atol, tol, precision)

    def __call__(self, values: list[float | None] | float) -> Any:
        """The floor for a figure of magnitude ``values`` (a list: one per figure)."""
        def one(v: float | None) -> float:
            magnitude = abs(v or 0.0)
            return max(self.atol + self.rtol * magnitude, (self.tol or 0.0) * max(1.0, magnitude))
        return [one(v) for v in values] if isinstance(values, list) else one(values)

    def described(self) -> str:
        """The floor as the rule's text says it, with why when it is a half precision's."""
        why = "" if self.precision == "float32" else f" (assert_close's {self.precision} tolerance: the reference " \
            f"computed in {self.precision})"
        return f"rtol {self.rtol:g} and atol {self.atol:g}{why}" + (f" or --tol {self.tol:g}" if self.tol else "")


def envelope(ref: list, noise: list | None) -> list[float]:
    """The running maximum of the noise run's distance from the reference, step by step (0 without a noise run)."""
    found, high = [], 0.0
    for i, r in enumerate(ref):
        n = noise[i] if noise is not None and i < len(noise) else None
        if r is not None and n is not None and math.isfinite(r) and math.isfinite(n):
            high = max(high, abs(n - r))
        found.append(high)
    return found


def curve(name: str, ref: list, target: list, noise: list | None, exact: bool, floor: Floor) -> dict:
    """One recorded curve judged (exact, or within the noise rule): the figures, the first step outside and why."""
    n = min(len(ref), len(target))
    allowed = None if exact else [max(NOISE_MULTIPLE * e, f) for e, f in zip(envelope(ref[:n], noise), floor(ref[:n]))]
    first = None
    for i, (r, t) in enumerate(zip(ref[:n], target[:n])):
        if r is None or t is None:
            continue
        same = r == t or (math.isnan(r) and math.isnan(t))
        if (exact and not same) or (not exact and not abs(t - r) <= allowed[i]):
            first = i
            break
    finite_ref = all(v is not None and math.isfinite(v) for v in ref[:n])
    finite_target = all(v is not None and math.isfinite(v) for v in target[:n])
    diffs = [abs(t - r) for r, t in zip(ref[:n], target[:n]) if r is not None and t is not None
             and math.isfinite(r) and math.isfinite(t)]
    status = ComparisonStatus.NON_FINITE if finite_ref and not finite_target else (
        ComparisonStatus.FAIL_SHAPE if len(ref) != len(target) else
        ComparisonStatus.FAIL_ACCURACY if first is not None else ComparisonStatus.PASS_ALLCLOSE)
    passed = status == ComparisonStatus.PASS_ALLCLOSE
    at = first if first is not None else (max(range(len(diffs)), key=lambda i: diffs[i] / allowed[i]) if diffs and allowed
                                          else None)
    comparison = Comparison(name, passed, status, tol=0.0 if exact else None, allclose=passed,
                            max_abs_diff=max(diffs) if diffs else 0.0, numel=n,
                            allowed=allowed[at] if allowed and at is not None else None,
                            at=(f"backward call {first + 1}" if name == "loss curve" else f"step {first + 1}")
                            if first is not None else None)
    return {"ref": ref, "target": target, "noise": noise, "allowed": allowed, "rule": "exact" if exact else "noise",
            "first_difference": first, "comparison": comparison}


@dataclass(frozen=True)
class Divergence:
    """Where two runs first differ beyond the rule: a module's output at the first forward, or a parameter's gradient
    after the first backward."""

    summary: Summary
    phase: str  # forward | backward
    distance: float
    allowed: float
    why: str | None  # in words, where the figures alone do not say it
    caller: Summary | None = None  # the nearest module around it whose class is not PyTorch's: the user's code

    def comparison(self) -> Comparison:
        s, c = self.summary, self.caller
        at = f"the first {self.phase}; {s.module_class} at {s.where}" if s.where else f"the first {self.phase}"
        if c is not None:
            at += f", called by {c.name} ({c.module_class} at {c.where})"
        return Comparison(s.name, False, ComparisonStatus.FAIL_ACCURACY, numel=s.numel, allowed=self.allowed,
                          relative_diff=self.distance, at=at, note=self.why)


def caller_of(summary: Summary, trace: ModuleTrace) -> Summary | None:
    """When ``summary``'s module is one of PyTorch's own (an nn.Linear), the nearest module around it whose class is
    not: a divergence first seen at the output of ``blocks.0.attn.out`` comes from the code of ``blocks.0.attn`` that
    fed it, which a line in torch/nn/modules/linear.py does not show. None when the module is the user's own."""
    import torch

    def pytorchs(where: str | None) -> bool:
        return where is not None and where.startswith(os.path.dirname(torch.__file__) + os.sep)

    if not pytorchs(summary.where):
        return None
    by_name = {s.name: s for s in trace.forward}
    parts = summary.name.split(".")
    for n in range(len(parts) - 1, 0, -1):
        around = by_name.get(".".join(parts[:n]))
        if around is not None and around.where and not pytorchs(around.where):
            return around
    return None


def module_allowance(ref: Summary, noise: Summary | None, floor: Floor) -> float:
    """How far a module's figure may move from the reference's: ``NOISE_MULTIPLE`` x its distance in the noise run
    (none given: no noise), never less than the floor, since even the same kernels may round one reduction's last bit
    otherwise. The one formula of ``first_divergent`` (which locates) and ``module_outputs`` (which decides)."""
    return max(NOISE_MULTIPLE * (ref.distance(noise) if noise is not None else 0.0), floor.rtol, floor.tol or 0.0)


def _pairs(ref: list[Summary], target: list[Summary]) -> Iterator[tuple[Summary, Summary | None]]:
    by_name = {s.name: s for s in target}
    for r in ref:
        yield r, by_name.get(r.name)


def first_divergent(ref: ModuleTrace, target: ModuleTrace, noise: ModuleTrace | None, exact: bool,
                    floor: Floor) -> Divergence | None:
    """The first module, in the reference's execution order (outputs, then gradients in backward order), whose
    target figure differs beyond the rule; None when none does. It names where a failing run diverges, and decides
    nothing itself: even the same kernels on the same numbers may round one reduction's last bit otherwise (the
    order a gradient is accumulated in), so a module differs only beyond the floor's ``rtol`` (and, under the noise
    rule, beyond ``NOISE_MULTIPLE`` times its own noise)."""
    noise_by_name = {s.name: s for s in [*noise.forward, *noise.grads]} if noise is not None else {}
    phases = (("forward", ref.forward, target.forward), ("backward", ref.grads[::-1], target.grads))
    for phase, ref_list, target_list in phases:
        for r, t in _pairs(ref_list, target_list):
            if t is None:
                return Divergence(r, phase, math.inf, 0.0, "it ran on the reference only (the target took another path)")
            if (r.numel == 0) != (t.numel == 0) and phase == "backward":
                side = "the target" if t.numel == 0 else "the reference"
                return Divergence(r, phase, math.inf, 0.0, f"it has no gradient on {side}")
            allowed = module_allowance(r, None if exact else noise_by_name.get(r.name), floor)
            if (d := r.distance(t)) > allowed:
                return Divergence(r, phase, d, allowed, None, caller_of(r, ref))
    return None


def final_state(ref: Curves, noise: Curves | None, target: Curves, exact: bool,
                floor: Floor) -> tuple[list[Comparison], list[Comparison]]:
    """The final parameters and the models' final buffers, each judged tensor by tensor (``final_tensors``)."""
    import torch

    def kept(c: Curves | None) -> dict | None:
        return torch.load(c.tensors, weights_only=True) if c is not None and c.tensors else None

    rs, ts, ns = kept(ref), kept(target), kept(noise)
    both = rs is not None and ts is not None
    params = final_tensors("parameters", ref.parameters, target.parameters, rs["parameters"] if both else None,
                           ts["parameters"] if both else None, ns["parameters"] if ns else None, exact, floor)
    one = [[ref.buffers], [target.buffers]] if ref.buffers and target.buffers else [[], []]
    buffers = final_tensors("buffers", *one, [rs["buffers"]] if both else None, [ts["buffers"]] if both else None,
                            [ns["buffers"]] if ns else None, exact, floor)
    return params, buffers


def final_tensors(kind: str, a: list[FinalParameters], b: list[FinalParameters], rs: list[list] | None,
                  ts: list[list] | None, ns: list[list] | None, exact: bool, floor: Floor) -> list[Comparison]:
    """One kind of final tensors (``kind``: "parameters", one group per optimizer; "buffers", one group), tensor by
    tensor: each equal (exact), else each within the noise rule; ``rs``, ``ts``, ``ns``: the reference's, target's and
    noise run's tensors (None: too large to keep whole, the digests decide). The summary first (how many tensors are
    within the rule, the worst named), then the worst tensors outside it."""
    if not a or not b:
        return []
    title, single = f"final {kind}", FINAL_BUFFER if kind == "buffers" else "final parameter"
    numel, count = sum(p.numel for p in b), sum(p.count for p in b)
    if [p.count for p in a] != [p.count for p in b]:
        per = " per optimizer" if kind == "parameters" else ""
        return [Comparison(title, False, ComparisonStatus.FAIL_SHAPE, numel=numel,
                           note=f"{[p.count for p in a]} tensors{per} on the reference, {[p.count for p in b]} "
                                "on the target")]

    def name(group: int, index: int) -> str:
        names = a[group].names
        return (names[index] if names and index < len(names) and names[index]
                else f"optimizer {group + 1}, tensor {index + 1}" if kind == "parameters" else f"tensor {index + 1}")

    if rs is None or ts is None:  # too large to keep whole: the digests alone, equal or not
        differing = [(g, i) for g, (x, y) in enumerate(zip(a, b)) for i, (dx, dy) in enumerate(zip(x.digests, y.digests))
                     if dx != dy]
        note = f"{count - len(differing)} of {count} tensors equal (digests: too large to keep whole)"
        return [Comparison(title, not differing, ComparisonStatus.PASS_ALLCLOSE if not differing else
                           ComparisonStatus.FAIL_ACCURACY, numel=numel, note=note
                           + (f"; first: {name(*differing[0])}" if differing else ""))]
    import torch

    judged: list[tuple[float, Comparison]] = []
    for g, (rg, tg) in enumerate(zip(rs, ts)):
        for i, (r, t) in enumerate(zip(rg, tg)):
            label = f"{single} {name(g, i)}"
            if r.shape != t.shape:
                judged.append((math.inf, Comparison(label, False, ComparisonStatus.FAIL_SHAPE, numel=int(t.numel()))))
                continue
            r64, t64 = r.double(), t.double()
            if not bool(torch.isfinite(t64).all()):
                judged.append((math.inf, Comparison(label, False, ComparisonStatus.NON_FINITE, numel=int(t.numel()))))
                continue
            d = float((t64 - r64).abs().max()) if r64.numel() else 0.0
            scale = float(r64.abs().max()) if r64.numel() else 0.0
            if exact:
                allowed = 0.0
            else:
                n = float((ns[g][i].double() - r64).abs().max()) if ns is not None and r64.numel() else 0.0
                allowed = max(NOISE_MULTIPLE * n, floor(scale))
            passed = d <= allowed
            judged.append(((d / allowed if allowed else d / (scale or 1.0) * 1e12) if d else 0.0,
                           Comparison(label, passed, ComparisonStatus.PASS if passed else ComparisonStatus.FAIL_ACCURACY,
                                      max_abs_diff=d, allowed=allowed, numel=int(t.numel()))))
    judged.sort(key=lambda item: -item[0])
    failing = [c for _, c in judged if not c.passed]
    worst = judged[0][1] if judged else None
    note = (f"{len(judged) - len(failing)} of {len(judged)} tensors {'equal' if exact else 'within the rule'}"
            + (f"; worst: {worst.name.removeprefix(single + ' ')}" if worst and worst.max_abs_diff else ""))
    summary = Comparison(title, not failing, ComparisonStatus.PASS_ALLCLOSE if not failing else
                         ComparisonStatus.FAIL_ACCURACY, numel=numel, max_abs_diff=worst.max_abs_diff if worst else None,
                         allowed=None if exact else worst.allowed if worst else None, note=note)
    return [summary, *failing[:3]]


def judge(ref: Curves, noise: Curves | None, target: Curves, exact: bool, tolerance: Tolerance,
          tol: float | None) -> ParityResult:
    """The parity result of a script's runs (the reference, its noise run, the target); ``tol``: --tol, if given."""
    floor = Floor.of(ref, tol)
    if ref.forwards and not ref.losses:
        return judge_inference(ref, noise, target, exact, tolerance, floor)
    rule = ("exact: the same kernels on the same numbers, every figure equal" if exact else
            f"noise: within {NOISE_MULTIPLE:g} x the reference's own rounding noise (a second reference run, every "
            f"parameter moved by one unit in the last place), never less than {floor.described()}")
    result = ParityResult(tolerance={**tolerance.described(), "rule": rule, "noise_multiple": NOISE_MULTIPLE})
    losses = curve("loss curve", ref.losses, target.losses, noise.losses if noise else None, exact, floor)
    result.loss_curve = losses
    failed = [] if losses["comparison"].passed else [losses["comparison"]]
    notes = []
    if ref.steps:
        norms = curve("gradient norm curve", ref.grad_norms, target.grad_norms, noise.grad_norms if noise else None,
                      exact, floor)
        result.gradients = [norms["comparison"]]
        result.grad_norm_curve = norms
        failed += [] if norms["comparison"].passed else [norms["comparison"]]
        params, buffers = final_state(ref, noise, target, exact, floor)
        result.outputs = [*params[:1], *buffers[:1], *params[1:], *buffers[1:]]
        failed += [c for c in params[:1] + buffers[:1] if not c.passed]
    else:
        notes.append("the script made no optimizer step: parity is judged on the losses it recorded only")
    if ref.steps != target.steps:
        notes.append(f"the reference made {ref.steps} optimizer steps, the target {target.steps}")
        failed.append(Comparison("optimizer steps", False, ComparisonStatus.FAIL_SHAPE))
    if failed:
        result.first_divergent_module = _divergence(ref, noise, target, exact, floor)
    if any(c.status == ComparisonStatus.NON_FINITE for c in failed):
        result.status = ParityStatus.NON_FINITE
        step = next((i for i, v in enumerate(target.losses) if v is None or not math.isfinite(v)), None)
        notes.insert(0, f"the target's loss is non-finite from backward call {step + 1 if step is not None else '?'} "
                        f"(loss {target.losses[step] if step is not None else '?'}) where the reference's is finite")
    elif failed:
        result.status = ParityStatus.FAIL_ACCURACY
        notes.insert(0, _outside_the_rule(failed, exact))
    else:
        result.status = ParityStatus.PASS
    result.notes = notes
    return result


def _divergence(ref: Curves, noise: Curves | None, target: Curves, exact: bool, floor: Floor) -> Comparison | None:
    """Where a failing run diverges first (``first_divergent``), as a comparison; None without module traces."""
    if ref.modules is None or target.modules is None:
        return None
    divergence = first_divergent(ref.modules, target.modules, noise.modules if noise else None, exact, floor)
    return divergence.comparison() if divergence is not None else None


def _outside_the_rule(failed: list[Comparison], exact: bool) -> str:
    """The note that leads a failed parity result: how many checks failed, each named with where and why."""
    named = ", ".join(c.name + (f" (from {c.at})" if c.at else "") + (f" ({c.note})" if c.note else "") for c in failed)
    return f"{len(failed)} check(s) outside the {'exact' if exact else 'noise'} rule: {named}"


def judge_inference(ref: Curves, noise: Curves | None, target: Curves, exact: bool, tolerance: Tolerance,
                    floor: Floor) -> ParityResult:
    """The parity result of an inference script (it never called backward): each module's output at the model's
    first call, and how many times the script called its model (a generation loop that stops at another length took
    another path)."""
    rule = ("exact: the same kernels on the same numbers, every module's output equal" if exact else
            f"noise: each module's output within {NOISE_MULTIPLE:g} x the reference's own rounding noise (a second "
            f"reference run, every parameter moved by one unit in the last place), never less than {floor.described()}")
    result = ParityResult(tolerance={**tolerance.described(), "rule": rule, "noise_multiple": NOISE_MULTIPLE})
    outputs = module_outputs(ref.modules or ModuleTrace(), target.modules or ModuleTrace(),
                             noise.modules if noise else None, exact, floor)
    result.outputs = [outputs]
    failed = [] if outputs.passed else [outputs]
    if ref.forwards != target.forwards:
        failed.append(Comparison("calls of the model", False, ComparisonStatus.FAIL_SHAPE,
                                 note=f"{ref.forwards} on the reference, {target.forwards} on the target"))
        result.outputs.append(failed[-1])
    if failed:
        result.first_divergent_module = _divergence(ref, noise, target, exact, floor)
    result.status = ParityStatus.FAIL_ACCURACY if failed else ParityStatus.PASS
    result.notes = [_outside_the_rule(failed, exact)] if failed else []
    result.notes.append(f"inference: the script called its model {ref.forwards} times and never backward; parity is "
                        "judged on each module's output at its first call")
    return result


def module_outputs(ref: ModuleTrace, target: ModuleTrace, noise: ModuleTrace | None, exact: bool,
                   floor: Floor) -> Comparison:
    """Each module's output at the model's first call, in the reference's order: every digest equal (exact), else each
    within ``NOISE_MULTIPLE`` x its own noise distance, never less than the floor (``first_divergent``'s rule, here
    deciding). The count within the rule, and the worst module named."""
    noise_by_name = {s.name: s for s in noise.forward} if noise is not None else {}
    judged = []
    for r, t in _pairs(ref.forward, target.forward):
        allowed = 0.0 if exact else module_allowance(r, noise_by_name.get(r.name), floor)
        d = math.inf if t is None else r.distance(t)
        passed = t is not None and (r.digest == t.digest if exact else d <= allowed)
        judged.append((d / allowed if allowed else (0.0 if passed else math.inf), d, allowed, r, passed))
    within = sum(1 for *_, passed in judged if passed)
    worst = max(judged, key=lambda item: item[0], default=None)
    note = f"{within} of {len(judged)} modules {'equal' if exact else 'within the rule'}" + (
        f"; worst: {worst[3].name} ({worst[3].module_class})" if worst and worst[1] else "")
    ok = bool(judged) and within == len(judged)
    return Comparison("module outputs at the model's first call", ok,
                      ComparisonStatus.PASS_ALLCLOSE if ok else ComparisonStatus.FAIL_ACCURACY,
                      numel=sum(r.numel for *_, r, _ in judged), relative_diff=worst[1] if worst else None,
                      allowed=None if exact or worst is None else worst[2], note=note)


def precision_difference(ref: ModuleTrace | None, target: ModuleTrace | None) -> str | None:
    """The modules whose first output has another dtype on the target than on the reference (None when none has): a
    device's autocast policy of its own (TorchNeuron's keeps layer_norm in float32 where the CPU's computes it in
    bfloat16), which makes the same script round otherwise without any fault."""
    if ref is None or target is None:
        return None
    dtypes = {s.name: s.dtype for s in target.forward}
    differ = [f"{s.name} ({s.module_class}): {s.dtype} on the reference, {dtypes[s.name]} on the target"
              for s in ref.forward if s.dtype and dtypes.get(s.name) and dtypes[s.name] != s.dtype]
    if not differ:
        return None
    return "; ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")


def shape_difference(ref: list[list] | None, target: list[list] | None) -> str | None:
    """How the tensors of the first backward differ in shape between two runs that computed the same thing (None when
    they do not, or when a run did not record them): the same autograd graph, node for node, saving tensors of other
    shapes, as when a library pads a batch for the target (TRL: a multiple of 128 on ``neuron``), where equal kernels
    no longer mean equal results. A graph with other nodes is another computation, not other shapes: that is
    parity's to judge, exactly."""
    if not ref or not target:
        return None
    if Counter((node, attr) for node, attr, _ in ref) != Counter((node, attr) for node, attr, _ in target):
        return None
    only_ref = Counter((node, attr, tuple(shape)) for node, attr, shape in ref)
    only_target = Counter((node, attr, tuple(shape)) for node, attr, shape in target)
    only_ref, only_target = only_ref - only_target, only_target - only_ref
    if not only_ref:
        return None
    pairs = []
    for node, attr, shape in sorted(only_ref):
        other = next((t for t in sorted(only_target) if t[:2] == (node, attr)), None)
        pairs.append(f"{node}.{attr} {list(shape)} on the reference, {list(other[2])} on the target")
    more = f" and {len(pairs) - 2} more" if len(pairs) > 2 else ""
    return "; ".join(pairs[:2]) + more
