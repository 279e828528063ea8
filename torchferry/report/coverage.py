"""The result model of `ferry coverage`: one row per (architecture, mode), the summary, the baseline marks.

``FORMAT_VERSION`` is the schema version of ``coverage.json``; bump it with a line below (and
in docs/coverage.md) on every incompatible change. Baseline files have their own version
(``BASELINE_VERSION``).

- 1: first version (meta, environment, config, headline, summary, rows, baseline).
- 2: the shared ``meta`` block (``format``, ``format_version``, ``torchferry``, ``created``,
  ``command``, ``wall_s``: the top-level ``wall_s`` moved into it); every row has the same
  keys (null when not measured); ``failure`` (null, or what stopped the sweep: ``kind``
  ``interrupted``, ``internal``, ...); ``complete`` (false when the sweep stopped early).
- 3: rows carry their ``suite`` and what they predict for the target (``profile``, ``op_calls``,
  ``fallback_share``, ``eager_signatures``, ``host_syncs``; with ``--compile``: ``graphs`` counted
  per mode, ``graph_breaks``, ``break_reasons``, ``fullgraph``); the summary is per suite
  (``summary.suites``) with a cross-suite ``table`` and the ``blocking_ops`` and ``blocking_breaks``
  rankings; ``environment`` holds ``versions`` and ``knobs``; ``config.shard`` (``K/N``) and, for
  ``ferry coverage merge``, ``shards`` (count, merged, missing, stores). Baseline rows are keyed
  ``suite/arch/mode`` (baseline version 2, with ``cost_s``).
- 4: the ``host-limit`` category (this host's memory or time ran out: out of the pass-rate
  denominator, counted in the headline) replaces ``timeout``; ``oom`` is the target's own
  memory; rows carry ``dtype``; per-mode summaries have ``host_limited``; ``config.method_settings``
  (the method's settings and the file they were taken from).
  Added since, compatibly: a row's ``known_issues`` (null where not predicted).
- 5: rows carry ``phases``; ``summary.time``; ``config.reuse_workers``.
- 6: the headline leads with what a migration decides, per suite for all modes and per mode: how many
  architectures work, work only with predicted host fallbacks (the top ops named), recompile (``--compile``),
  fail on the device, are host-limited or skipped; each mode's and ``all_modes``' summary has ``outcomes``
  (those counts) and ``host_fallback_ops`` (the top ops of its host-fallback rows); ``config.skipped_configs``
  (``--configs`` files that are not model configs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from torchferry.records import Record
from torchferry.report.meta import Failure, Meta

FORMAT_VERSION = 6
FORMAT = "torchferry.coverage"
DEFAULT_SUITE = "causal-lm"  # rows of stores and baselines that name no suite
BASELINE_VERSION = 2  # 2: rows keyed suite/arch/mode, cost_s per suite/arch (1: arch/mode, causal-lm only)


class Category(StrEnum):
    PASS = "pass"
    FAIL_PARITY = "fail-parity"
    FAIL_FALLBACK = "fail-fallback"
    FAIL_COMPILE = "fail-compile"
    FAIL_RECOMPILE = "fail-recompile"
    ERROR = "error"
    OOM = "oom"  # the target's own memory (its capacity per device) ran out: a device verdict
    HOST_LIMIT = "host-limit"  # this host's memory or time ran out (or would): not a device verdict, out of the denominator
    SKIPPED = "skipped"  # cannot be measured for a reason that is not the target's fault: out of the denominator


# categories that say nothing about the target: the pass rate's denominator leaves them out
UNMEASURED = (Category.HOST_LIMIT, Category.SKIPPED)


class Outcome(StrEnum):
    """What a migration decides from a row: whether the model runs on the device, and on what terms. The vendor's
    own sweep counts a case as working when it does not raise; the categories say on what terms it works."""

    WORKS = "works"  # pass: correct, no predicted host fallback
    HOST_FALLBACKS = "host_fallbacks"  # correct, with ops the device profile predicts run on the host
    RECOMPILES = "recompiles"  # --compile: correct, with a graph compiled per input signature
    FAILS = "fails"  # wrong results, an error, the target's own memory, or the backend's compile
    HOST_LIMITED = "host_limited"  # this host's memory or time: no verdict on the device
    SKIPPED = "skipped"  # not the device's fault (the config, the reference): no verdict either


OUTCOME_OF = {Category.PASS: Outcome.WORKS, Category.FAIL_FALLBACK: Outcome.HOST_FALLBACKS,
              Category.FAIL_RECOMPILE: Outcome.RECOMPILES, Category.FAIL_PARITY: Outcome.FAILS,
              Category.FAIL_COMPILE: Outcome.FAILS, Category.ERROR: Outcome.FAILS, Category.OOM: Outcome.FAILS,
              Category.HOST_LIMIT: Outcome.HOST_LIMITED, Category.SKIPPED: Outcome.SKIPPED}
# an architecture's outcome over its modes is its worst mode's, in this order
OUTCOME_ORDER = (Outcome.SKIPPED, Outcome.HOST_LIMITED, Outcome.FAILS, Outcome.RECOMPILES, Outcome.HOST_FALLBACKS,
                 Outcome.WORKS)


CATEGORIES = tuple(Category)


class Mark(StrEnum):
    """A row against the baseline's expected category."""

    UNCHANGED = "unchanged"
    FIXED = "fixed"
    REGRESSED = "regressed"
    NEW = "new"


def case_key(suite: str, arch: str, mode: str) -> str:
    """``suite/arch/mode``: one case across suites (a store's, a merge's and a sweep's key)."""
    return f"{suite}/{arch}/{mode}"


@dataclass(frozen=True)
class Row(Record):
    """One case: an architecture in one mode on the target, judged against the reference. Frozen: a figure the
    parent adds (its clock, the log, the baseline's mark) makes a new row (``dataclasses.replace``). It crosses from
    the worker that measured it to the parent, and into the store, as a record (torchferry.records): an unknown
    field, category or mark is refused by name."""

    arch: str
    mode: str
    category: Category
    reason: str
    model_id: str | None = None  # the Hub model id, when the row's config names one (a Hub id, or an <org>_<name>_config.json)
    suite: str = DEFAULT_SUITE
    device: str = ""
    ref: str = ""
    compile: str | None = None
    wall_s: float = 0.0  # parent's clock: the first mode of an architecture includes its worker's start (when fresh) and the model build
    case_s: float | None = None  # the worker's clock for this mode alone
    # where the time went, in seconds (the worker's clock): start (interpreter and torchferry's imports; 0 in a
    # warm worker), setup (torch, the suite's library, plugins, devices), build (the model and its smoke
    # forward) on the first mode of an architecture; first_call (the target's first call of the mode) and,
    # with --compile, compile (Dynamo and the backend) on every mode
    phases: dict[str, float] | None = None
    model_class: str | None = None
    variant: str | None = None  # the shrink variant that built
    dtype: str | None = None  # the parameters' dtype the case ran in (the config's own under --method torchneuron)
    params: int | None = None
    checks: int | None = None
    failed_checks: int | None = None
    fallback_ops: dict[str, int] = field(default_factory=dict)  # op -> calls that ran (or would run) on the host
    # what the row predicts for the target (torchferry.coverage.predict); None where not measured
    profile: str | None = None  # the built-in device's profile that predicted them; None: a real device measured them
    op_calls: int | None = None  # op calls on the target in this mode: the denominator of fallback_share
    fallback_share: float | None = None  # host-fallback calls / op_calls
    eager_signatures: int | None = None  # eager op signatures (NEFF compiles) this mode added to its process
    host_syncs: dict[str, int] | None = None  # host waits for a device value, by cause
    # the target vendor's known issues among the mode's ops: {op, kind, calls, reason, source} each
    # (torchferry.device.known_issues()); evidence from the vendor's CI, not a measured failure: no category
    known_issues: list[dict] | None = None
    graphs: int | None = None  # --compile: graphs Dynamo captured in this mode
    signatures: int | None = None  # --compile: input signatures the mode ran
    graph_breaks: int | None = None  # --compile: distinct graph breaks (reason and place)
    break_reasons: list[dict] | None = None  # --compile: {reason, where, count}, as Dynamo's explain reports them
    fullgraph: bool | None = None  # --compile: captured without a break, what torch.compile(fullgraph=True) requires
    cache: str | None = None
    tokens: dict | None = None
    log: str | None = None
    traceback: str | None = None
    baseline: Mark | None = None

    @property
    def key(self) -> str:
        """The row within its suite (the baseline's key)."""
        return f"{self.arch}/{self.mode}"

    @property
    def case(self) -> str:
        """The row across suites (the store's and a merge's key)."""
        return case_key(self.suite, self.arch, self.mode)


@dataclass
class CoverageReport:
    meta: Meta
    environment: dict
    config: dict
    headline: list[str]
    summary: dict
    rows: list[Row]
    complete: bool = True
    baseline: dict | None = None  # file, counts, regressed, fixed, missing
    failure: Failure | None = None
    shards: dict | None = None  # a merge: count, merged, missing, stores, unassigned (cases no store was assigned)
