"""What the target does with each op, handed to the C++ core, and the accounting that
TorchNeuron's own API (`torch.neuron.get_fallback_ops()`, ...) does not cover:

- `executed_op_count()`: the device's op calls so far, one number, cheap to read at every step;
- `uncounted()`: a span of this thread's device work left out of every count and warning (a
  harness's own reads inside a user's process: its loss read is not the user's host sync);
- `host_syncs()`: where the host waits for a device value (`item()`, `bool(t)`,
  `.cpu()`/`.tolist()`, the output size of data-dependent ops, boolean-mask indexing);
- `eager_compiles()`: the NEFF compilations TorchNeuron's eager mode would pay for, one
  per distinct op signature, persisted in `TORCH_NEURONX_NEFF_CACHE_DIR` so that a
  second process sees a warm cache (`forget_eager_signatures()` makes this process count
  as that second one);
- `fallback_summary()`: one line naming the host-fallback ops (the per-op warnings come once per op);
- `exit_summary()`: that line with the host syncs and the eager compilations (in all, and new after
  the first optimizer step), printed at exit of any process that ran device ops: what decides the
  time on the target, for the one-line change (`TORCHFERRY_DEVICE=neuron python train.py`).
- `known_issues()`: the ops run so far that the target's vendor skips in its own CI
  (the profile's known issues; each also warns once, on its first call).

These are torchferry functions (`torchferry.device.*`): TorchNeuron has no such names.
"""

from __future__ import annotations

import atexit
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from types import ModuleType

from torchferry.device import _settings
from torchferry.device.profile import COMPILES, HOST_COPY, HOST_PREDICTED, DeviceProfile

_cache: SignatureCache | None = None
_fallback_mode = "warn"  # as last configured (tests and the decision test change it)
_numerics = "host"
_op_codes: dict[str, int] = {}  # the profile's op codes as handed to the C++ core (profile.op_codes)
_rules: frozenset[str] = frozenset()  # the profile's [rules] in force, as last configured
_default_code = 0
_after_first_step: EagerCompiles | None = None  # the counts when the first optimizer step ended


@dataclass(frozen=True)
class EagerCompiles:
    """Eager-mode compilation counts of this process (or, from `since`, of an interval).

    signatures: distinct op signatures run; compilations: those the persistent cache
    lacked (a cold NEFF compile each); cache_hits: those found on disk; calls: op calls
    that ran a compiled program.
    """

    signatures: int
    compilations: int
    cache_hits: int
    calls: int

    def since(self, mark: EagerCompiles) -> EagerCompiles:
        """The counts between `mark` (an earlier `eager_compiles()`) and this one."""
        return EagerCompiles(self.signatures - mark.signatures, self.compilations - mark.compilations,
                             self.cache_hits - mark.cache_hits, self.calls - mark.calls)


class SignatureCache:
    """Op signatures on disk, one hex word per line, in a file per target source commit."""

    def __init__(self, directory: Path, commit: str) -> None:
        self.path = directory / f"torchferry-eager-signatures-{commit[:12]}.txt"
        self._warned = False

    def load(self) -> list[int]:
        try:
            return [int(line, 16) for line in self.path.read_text().split()]
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            self._warn(f"cannot read it ({exc})")
            return []

    def save(self, signatures: list[int]) -> None:
        if not signatures or self._warned:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:  # appends of whole lines: concurrent processes interleave safely
                f.write("".join(f"{s:016x}\n" for s in signatures))
        except OSError as exc:
            self._warn(f"cannot write it ({exc})")

    def _warn(self, what: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"eager-compile cache {self.path}: {what}. Compilations are counted in memory for this "
                f"process only; set {_settings.NEFF_CACHE_DIR_ENV} to a writable folder to keep them.",
                stacklevel=2,
            )


def configure(core: ModuleType, profile: DeviceProfile, fallback: str, numerics: str | None = None) -> None:
    """Hand the profile's tables, the fallback mode and the numerics (default: as before)
    to the C++ core."""
    global _fallback_mode, _numerics, _op_codes, _default_code, _rules
    codes, reasons, default, default_reason = profile.op_codes()
    numerics = numerics or _numerics
    core._set_target(codes, reasons, default, default_reason, _settings.fallback_code(fallback), profile.name,
                     numerics == "target", profile.rules_mask(), profile.int32_arguments())
    _fallback_mode, _numerics = fallback, numerics
    _op_codes, _default_code = codes, default
    _rules = frozenset(name for name, on in profile.rules.items() if on)


def rule_on(name: str) -> bool:
    """Whether the profile's [rules] entry `name` (profile.RULES) is in force: the compile backend's
    and the process group's rules, which run in Python (the C++ core reads the others as bits)."""
    return name in _rules


def numerics() -> str:
    """The numerics in force: "target" (64-bit values at the target's 32 bits) or "host"."""
    return _numerics


def narrows_64bit(op: str) -> bool:
    """Whether the target computes 64-bit values of `op` (a full ATen name, `aten::add.Tensor`)
    at 32 bits: target numerics is on and the target compiles the op (a native, non-view op;
    the same rule the C++ core applies in eager mode, csrc/Target.cpp `classify`).

    An ATen graph keeps ops the eager device never sees: PyTorch's `X.Scalar` overloads
    are composites that wrap the scalar and call `X.Tensor`, so they take its answer.
    """
    if _numerics != "target":
        return False
    if op not in _op_codes and op.endswith(".Scalar"):
        op = _tensor_overload(op)
    return bool(_op_codes.get(op, _default_code) & COMPILES)


def _tensor_overload(op: str) -> str:
    """`aten::X.Tensor` for `aten::X.Scalar`: PyTorch's composite wraps the scalar and calls it, so the
    eager device sees that overload where a graph keeps the Scalar one."""
    return op.removesuffix("Scalar") + "Tensor"


def runs_on_host(op: str) -> bool:
    """Whether the target runs `op` (a full ATen name) on the host: a predicted or explicit
    host fallback of the profile, as the eager device counts it (views never are)."""
    return _op_codes.get(op, _default_code) & 3 in (HOST_COPY, HOST_PREDICTED)


def known_issue(op: str) -> tuple[str, frozenset[torch.dtype]] | None:
    """The known issue of the target's vendor that a call of `op` (a full ATen name) meets, as the
    eager device meets it: (the overload it is listed under, the dtypes it is scoped to; empty: every
    dtype), or None. A graph's `X.Scalar` meets the issue of `X.Tensor`, which its composite calls."""
    import torch

    from torchferry.device import _runtime

    known = _runtime.profile().known_issues
    if known is None:
        return None
    if op not in known.by_op and op.endswith(".Scalar"):
        op = _tensor_overload(op)
    issue = known.by_op.get(op)
    return None if issue is None else (op, frozenset(getattr(torch, d) for d in issue.dtypes))


def start(core: ModuleType, profile: DeviceProfile, environ: Mapping[str, str]) -> None:
    """Load the persistent signatures and arrange the exit-time save and summary."""
    global _cache
    commit = profile.native_ops.source_commit if profile.native_ops else profile.name
    _cache = SignatureCache(_settings.neff_cache_dir(environ), commit)
    core._load_persisted_signatures(_cache.load())
    _mark_first_optimizer_step()
    if profile.known_issues is not None:
        core._set_known_issues(profile.known_issues.warnings(), profile.known_issues.dtype_scopes())
    atexit.register(_at_exit)


def _mark_first_optimizer_step() -> None:
    """Keep the eager-compile counts at the end of the first optimizer step of any optimizer: signatures
    that appear after it are the ones a steady training loop keeps compiling. The hook stays registered
    and does nothing after the first step: removing it from inside the call would mutate the global hook
    table while `Optimizer.step` iterates over it ("OrderedDict mutated during iteration" as soon as
    another global hook, such as `ferry check -- ...`'s recorder, is registered)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def mark(*_: object) -> None:
        global _after_first_step
        if _after_first_step is None:
            _after_first_step = eager_compiles()

    register_optimizer_step_post_hook(mark)


def _core() -> ModuleType:
    core = sys.modules["torchferry.device._runtime"]._C  # read by the recorders several times a step: no import
    if core is None:
        from torchferry.device import _runtime

        return _runtime.core()  # its error: the device is not enabled
    return core


def eager_compiles() -> EagerCompiles:
    """Counts of this process so far; new signatures are written to the persistent cache."""
    core = _core()
    if _cache is not None:
        _cache.save(core._take_unsaved_signatures())
    c = core._eager_compile_counts()
    return EagerCompiles(c["signatures"], c["compilations"], c["cache_hits"], c["calls"])


def forget_eager_signatures() -> None:
    """From now on, count the op signatures this process has run as a new process would: each one
    again, found in the persistent cache (a cache hit, not a cold compilation).

    For harnesses that run several independent cases in one process (a coverage sweep's warm
    worker): each case's `eager_compiles()` figures are then those it would have in a process of
    its own after the earlier cases. The counts stay cumulative, so intervals taken with `since`
    across the call stay valid."""
    if _cache is not None:
        _cache.save(_core()._take_unsaved_signatures())
    _core()._forget_seen_signatures()


def executed_op_count() -> int:
    """Op calls the device ran since the last `torch.neuron.clear_op_tracking()`: the sum of
    `torch.neuron.get_executed_ops()` without building that table (about 35 us), for a harness that
    reads it several times a step."""
    return int(_core()._executed_op_count())


class uncounted:  # noqa: N801 - a context manager used as a function, like torch.no_grad
    """Run this thread's device work inside the block outside the accounting: no op, host sync, eager
    signature or known-issue call counted, no fallback warning. For a harness's own work inside a user's
    process (a loss read, a gradient norm), which would otherwise count as the user's: two calls into the
    core (a class, not a generator: entered a few times a step), where subtracting counter readings taken
    around the block cost about 50 us a step."""

    def __enter__(self) -> None:
        _core()._enter_uncounted()

    def __exit__(self, *exc: object) -> None:
        _core()._exit_uncounted()


def host_syncs() -> dict[str, int]:
    """Host syncs since the last `torch.neuron.clear_op_tracking()`, by what caused them."""
    return dict(sorted(_core()._host_syncs().items()))


def fallback_summary() -> str:
    """One line: how many ops ran on the host, the most frequent first ('' when none)."""
    counts = _core()._fallback_ops()
    if not counts:
        return ""
    from torchferry.device import _runtime

    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{op} ({n})" for op, n in ranked[:8])
    more = f" and {len(ranked) - 8} more" if len(ranked) > 8 else ""
    return (f"torchferry: {len(ranked)} ops ran as host fallbacks on '{_runtime.profile().name}' "
            f"({sum(counts.values())} calls): {shown}{more}; see torch.neuron.get_fallback_ops()")


def exit_summary() -> str:
    """One short paragraph ('' when no device op ran): the host-fallback line, the host syncs and the eager
    compilations, and where the full report is."""
    from torchferry.device import _runtime

    compiles = eager_compiles()
    syncs = host_syncs()
    if not compiles.signatures and not syncs:
        return ""
    first = fallback_summary() or f"torchferry: no op ran as a host fallback on '{_runtime.profile().name}'"
    causes = sorted(syncs.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = f" ({', '.join(f'{k} {n}' for k, n in causes[:4])}{', ...' if len(causes) > 4 else ''})" if causes else ""
    if _after_first_step is None:
        later = "no optimizer step ran, so none is counted after the first step"
    else:
        later = f"{compiles.signatures - _after_first_step.signatures} new after the first optimizer step"
    return "\n".join([
        first,
        f"  host syncs: {sum(syncs.values())}{shown}; eager compilations: {compiles.signatures} op signatures, each "
        f"a compiled program on the target ({compiles.compilations} cold, {compiles.cache_hits} from the cache), "
        f"{later}",
        "  the full report (per step, with the reasons): `ferry check -- python <your script>`, or "
        "torchferry.device.host_syncs() and torchferry.device.eager_compiles()",
    ])


def fallback_reasons() -> dict[str, str]:
    """op -> why it ran on the host, for the host-fallback ops seen so far, and why the host waited for it, for
    the ops seen so far that the target runs after reading device values (one_hot reads its indices' range)."""
    return dict(sorted(_core()._fallback_reasons().items()))


def known_issues() -> list[dict[str, object]]:
    """The target's known issues among the ops run since the last `torch.neuron.clear_op_tracking()`,
    one record per vendor op (``op``, ``kind``, ``reason``, ``scope``, ``source``, ``dtypes``, ``calls``,
    ``overloads``), most calls first. An issue scoped to dtypes (``dtypes`` not empty: "bfloat16
    gradient mismatch") counts only the calls that ran on a device tensor of one of them. The ops
    of compiled graphs count once per call of their graph (`compile.known_issues`). Empty when
    the profile has no known-issue table.

    The records are evidence from the vendor's own CI (its tests skip these ops), not a failure
    measured here: the device runs them with the CPU's kernels. See docs/device/fidelity.md."""
    from torchferry.device import _runtime

    known = _runtime.profile().known_issues
    if known is None:
        return []
    core, by_op = _core(), known.by_op
    calls: dict[str, int] = {}  # vendor op -> calls of its overloads (in its dtypes, where scoped)
    overloads: dict[str, list[str]] = {}
    scoped, in_graphs = core._known_issue_calls(), core._graph_known_issue_calls()
    for counts in (core._executed_ops(), core._fallback_ops(), scoped, in_graphs):
        for name, n in sorted(counts.items()):
            # Op counts hold every call; the scoped and graph counts only those in scope.
            if name in by_op and (counts is in_graphs or bool(by_op[name].dtypes) == (counts is scoped)):
                op = by_op[name].op
                calls[op] = calls.get(op, 0) + n
                if name not in overloads.setdefault(op, []):
                    overloads[op].append(name)
    issues = {issue.op: issue for issue in known.issues}
    return [{"op": op, "kind": issues[op].kind, "reason": issues[op].reason, "scope": issues[op].scope,
             "source": issues[op].source, "dtypes": list(issues[op].dtypes), "calls": calls[op],
             "overloads": sorted(overloads[op])}
            for op in sorted(calls, key=lambda op: (-calls[op], op))]


def _at_exit() -> None:
    try:
        eager_compiles()
        paragraph = exit_summary() if _fallback_mode == "warn" else ""
        if paragraph:
            print(paragraph, file=sys.stderr)
    except Exception:  # exiting anyway: never turn a clean exit into an error
        pass
