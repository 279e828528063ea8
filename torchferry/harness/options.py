"""The one vocabulary of `ferry`'s options: each option's spelling, meaning, unit and range, and where it applies.

Every subcommand that takes one of these options gets it from ``OPTIONS`` (``add_arguments``), so a
flag means the same in every subcommand: the same spelling, the same help text, the same unit and the
same range (``torchferry.harness.bounds``, checked by ``check_values``). Where a command runs several
kinds of workload (`ferry check`'s sources: a ``build()`` workload, a model by name, a script), each
option says which sources it applies to, and ``refuse_unused`` refuses, by name and with the reason and
the fix, an option given with a source that would not read it: a user who passes ``--compile neuron``
with a script must not believe the compiled path was checked.

Options are registered with ``argparse.SUPPRESS`` as their default, so that the parsed namespace says
which ones the user gave; ``given`` reads that, and ``apply_defaults`` then fills in the command's
defaults. docs/check/cli.md shows the table.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchferry.errors import UsageError
from torchferry.harness import bounds
from torchferry.harness.bounds import Bound

# `ferry check`'s sources: what runs, and so which options are read
WORKLOAD, MODEL, SCRIPT = "workload", "model", "script"
SOURCES = (WORKLOAD, MODEL, SCRIPT)
BUILT = (WORKLOAD, MODEL)  # the sources torchferry builds and steps itself (the worker pipeline)
SOURCE_NAMES = {WORKLOAD: "a build() workload (-w file.py:build, a built-in name)",
                MODEL: "a model by name (-w: a model type, a config.json, a Hub id)",
                SCRIPT: "a script (`-- COMMAND`)"}
# what a precision name means to each part: the autocast dtype of a step (check, coverage) and plan's layouts
PRECISIONS = ("fp32", "bf16-mixed", "bf16")
PRECISION_DTYPES = {"fp32": "float32", "bf16-mixed": "bfloat16"}  # autocast dtype of the steps check runs


@dataclass(frozen=True)
class Option:
    """One option: its spellings, its one meaning, its unit and range, and the commands (and sources) it applies to.

    ``commands`` maps a subcommand to the sources it reads the option for (``()``: the command has no sources);
    ``defaults`` holds each command's default where it differs; ``refusal`` says why a source that does not read
    the option ignores it and what to do instead (the message of ``refuse_unused``).
    """

    flags: tuple[str, ...]
    meaning: str
    group: str
    commands: Mapping[str, tuple[str, ...]]
    kind: str = "str"  # str | int | float | flag | append
    unit: str = ""
    bound: Bound | None = None
    metavar: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    refusal: str = ""

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")

    @property
    def name(self) -> str:
        """The long spelling, as messages name it."""
        return self.flags[-1]

    def default(self, command: str) -> Any:
        if command in self.defaults:
            return self.defaults[command]
        return [] if self.kind == "append" else False if self.kind == "flag" else None

    def help(self, command: str) -> str:
        unit = f" [{self.unit}]" if self.unit and self.unit not in self.meaning else ""
        default = self.default(command)
        shown = "" if default in (None, False, []) else f" (default: {default})"
        return f"{self.meaning}{unit}{shown}".replace("%", "%%")


def _all(*commands: str) -> dict[str, tuple[str, ...]]:
    return {c: SOURCES if c == "check" else () for c in commands}


def _built(*others: str) -> dict[str, tuple[str, ...]]:
    return {"check": BUILT, **{c: () for c in others}}


SCRIPT_BUILDS_ITS_OWN = ("the script builds its own model, batches and optimizer: change them in the script, or check "
                         "a model with -w path/to/file.py:build")
SCRIPT_TIMES_ITSELF = ("a script's steps are timed as the script runs them (its steady step is the median of its later "
                       "steps): drop the option")

OPTIONS: tuple[Option, ...] = (
    # -- what runs --------------------------------------------------------------------------------
    Option(("-w", "--workload"), "the workload: a built-in (llama, gpt2, bert, mlp), path/to/file.py:build (relative to "
           "the current folder), package.module:build, or a Hugging Face model: a model type (mistral), a config.json "
           "or a folder holding one, a Hub id org/name[@revision] (config only; random weights)", "workload",
           {"check": BUILT, "plan": ()}, metavar="SPEC", defaults={"check": "llama"},
           refusal="the script is the workload: give either -w or `-- COMMAND`, not both"),
    Option(("--weights",), "a Hub id or checkpoint folder given to -w: load its weights (default: random weights)",
           "workload", {"check": (MODEL,)}, kind="flag",
           refusal="only a model given by name (-w org/name, or a checkpoint folder) has weights to load"),
    Option(("--trust-remote-code",), "let a model's repository code run (configs with an auto_map), as transformers' "
           "trust_remote_code; refused without it", "workload", {"check": (MODEL,), "coverage": (), "plan": ()},
           kind="flag", refusal="only a model given by name has repository code"),
    Option(("--mode",), "train, forward or generate (also: training, inference, generation)", "workload",
           {"check": BUILT}, metavar="MODE", defaults={"check": "train"},
           refusal="an unchanged script is checked as it trains. Drop --mode, or check the model with -w "
                   "path/to/file.py:build --mode MODE"),
    Option(("--size",), "the size of the model: tiny, small, base for `ferry check` (a built-in workload's size; a model "
           "by name shrunk to it, its architecture kept); a Llama shape at full size (8b, 70b, ...) for `ferry plan` "
           "(default there: 8b)", "workload", {"check": BUILT, "plan": ()},
           metavar="SIZE", defaults={"check": "tiny"},
           refusal="--size picks a built-in model's size; " + SCRIPT_BUILDS_ITS_OWN),
    Option(("--batch-size",), "the global batch of one step (all ranks together)", "workload",
           {"check": BUILT, "plan": ()}, kind="int", unit="samples or sequences", bound=bounds.COUNT,
           refusal=SCRIPT_BUILDS_ITS_OWN),
    Option(("--seq-len",), "tokens per sequence", "workload", {"check": BUILT, "plan": ()}, kind="int", unit="tokens",
           bound=bounds.COUNT, defaults={"plan": 4096}, refusal=SCRIPT_BUILDS_ITS_OWN),
    Option(("--precision",), "fp32; bf16-mixed (bf16 compute under autocast, fp32 weights and optimizer state); bf16 "
           "(bf16 everywhere; `ferry plan` only)", "workload", {"check": BUILT, "plan": ()}, metavar="PRECISION",
           defaults={"check": "fp32", "plan": "bf16-mixed"},
           refusal="the script chooses its own precision (autocast or dtypes in its code): drop --precision"),
    Option(("--steps",), "optimizer steps (train), forward calls or generate calls of a build() workload (default: 8); "
           "with `-- COMMAND`, stop the script cleanly after N optimizer steps (default: run it to its end)",
           "workload", {"check": SOURCES}, kind="int", unit="steps", bound=bounds.COUNT),
    Option(("--new-tokens",), "tokens per generate call, greedy", "workload", {"check": BUILT}, kind="int",
           unit="tokens", bound=bounds.COUNT, defaults={"check": 8}, refusal=SCRIPT_BUILDS_ITS_OWN),
    Option(("--seed",), "the seed of weights, batches and random draws; with `-- COMMAND`, the seed given to a script "
           "that does not seed its generators", "workload", {"check": SOURCES, "coverage": ()}, kind="int",
           bound=bounds.SEED, defaults={"check": 1337, "coverage": 1337}),
    Option(("--lr",), "AdamW learning rate in train mode", "workload", {"check": BUILT}, kind="float",
           bound=bounds.POSITIVE, defaults={"check": 1e-3}, refusal=SCRIPT_BUILDS_ITS_OWN),
    # -- devices ----------------------------------------------------------------------------------
    Option(("--ref",), "the reference device", "devices", {"check": SOURCES, "coverage": ()},
           defaults={"check": "cpu", "coverage": "cpu"}),
    Option(("--target",), "the device to check (default: a real neuron backend, else the current accelerator, else the "
           "built-in neuron)", "devices", {"check": SOURCES, "coverage": ()}),
    Option(("--compile",), "torch.compile the target with this backend (the reference stays eager)", "devices",
           {"check": BUILT, "coverage": ()}, metavar="BACKEND",
           refusal="the script's own code decides whether it compiles: add torch.compile(model, backend=...) to the "
                   "script, or check a model with -w path/to/file.py:build --compile BACKEND"),
    Option(("--nproc",), "run the target data-parallel (DDP) in N processes per node through torch.distributed.run, "
           "each on 1/N of every batch; the reference stays one process on the whole batch", "devices",
           {"check": BUILT}, kind="int", unit="processes", bound=bounds.COUNT, metavar="N", defaults={"check": 1},
           refusal="a script starts its own processes: give the launcher in the command, e.g. `ferry check -- torchrun "
                   "--nproc-per-node N train.py`"),
    Option(("--nnodes",), "nodes of the target's process group; this one is node 0 (needs --rdzv-endpoint)", "devices",
           {"check": BUILT}, kind="int", unit="nodes", bound=bounds.COUNT, metavar="N", defaults={"check": 1},
           refusal="a script starts its own processes: give the launcher's --nnodes in the command"),
    Option(("--rdzv-endpoint",), "rendezvous of the target's ranks, reachable from every node (default: a free local "
           "port)", "devices", {"check": BUILT}, metavar="HOST:PORT",
           refusal="a script starts its own processes: give the launcher's --rdzv-endpoint in the command"),
    Option(("--device-rng",), "let the target draw random numbers from its own generator (its own stream), instead of "
           "the reference's stream that a check gives both sides by default (docs/check/parity.md)", "devices",
           {"check": SOURCES}, kind="flag"),
    # -- measurement ------------------------------------------------------------------------------
    Option(("--tol",), "parity tolerance (default: per mode and precision, docs/check/parity.md)", "measurement",
           {"check": SOURCES, "coverage": ()}, kind="float", bound=bounds.POSITIVE),
    Option(("--rounds",), "interleaved steady-state rounds", "measurement", {"check": BUILT}, kind="int",
           bound=bounds.COUNT, defaults={"check": 3}, refusal=SCRIPT_TIMES_ITSELF),
    Option(("--reps",), "repetitions per device per steady-state round", "measurement", {"check": BUILT}, kind="int",
           bound=bounds.COUNT, defaults={"check": 3}, refusal=SCRIPT_TIMES_ITSELF),
    Option(("--steady-budget",), "when a real target's steady-state figures are unstable after --rounds, add rounds "
           "until they are stable or this many seconds are spent (0 adds none)", "measurement", {"check": BUILT},
           kind="float", unit="seconds", bound=Bound(low=0, why="0 adds no rounds."), metavar="SECONDS",
           defaults={"check": 30}, refusal=SCRIPT_TIMES_ITSELF),
    Option(("--timeout",), "seconds one phase may take: a worker's phase (check of a workload), a run of the script "
           "(check of a script), one case (coverage)", "measurement", {"check": SOURCES, "coverage": ()},
           kind="float", unit="seconds", bound=bounds.SECONDS, defaults={"check": 600, "coverage": 300}),
    Option(("--trace",), "write one torch.profiler Chrome trace per device (CPU and device activity) over a few steady "
           "steps after the timed ones, into the report folder", "measurement", {"check": BUILT}, kind="flag",
           refusal="profile the script itself with torch.profiler, or check a model with -w path/to/file.py:build "
                   "--trace"),
    # -- cost --------------------------------------------------------------------------------------
    Option(("--profile",), "the device profile that describes the target (its memory per logical core, its ops: "
           "torchferry/device/profiles/)", "devices", {"plan": ()}, metavar="NAME", defaults={"plan": "trn2"}),
    Option(("--prices",), "TOML price table merged over the shipped one", "cost", {"check": SOURCES, "plan": ()},
           metavar="FILE"),
    Option(("--ref-instance",), "price-table instance of the reference (check: default by device type, if any; plan: "
           "also bound time and cost on it, e.g. p5.48xlarge)", "cost", {"check": SOURCES, "plan": ()},
           metavar="INSTANCE"),
    Option(("--target-instance",), "price-table instance of the target (default: the table's for the device type)",
           "cost", {"check": SOURCES, "plan": ()}, metavar="INSTANCE"),
    Option(("--eng-hours",), "engineering hours the migration costs", "cost", {"check": SOURCES}, kind="float",
           unit="hours", bound=bounds.NON_NEGATIVE, defaults={"check": 40}),
    Option(("--eng-rate",), "engineering cost per hour", "cost", {"check": SOURCES}, kind="float", unit="USD per hour",
           bound=bounds.NON_NEGATIVE, defaults={"check": 150}),
    Option(("--volume",), "units per month to amortise over (tokens or samples; a script's optimizer steps)", "cost",
           {"check": SOURCES}, kind="float", unit="units per month", bound=bounds.POSITIVE, defaults={"check": 1e9}),
    # -- output ------------------------------------------------------------------------------------
    Option(("-o", "--output"), "where the report is written: a folder (check, coverage, plan: the reports and the run's "
           "files) or one file (scan: '-' is stdout), written atomically", "output",
           {"check": SOURCES, "coverage": (), "plan": (), "scan": ()}, metavar="PATH",
           defaults={"check": "ferry-report", "coverage": "ferry-coverage", "plan": "ferry-plan", "scan": "-"}),
    Option(("-q", "--quiet"), "no progress on stderr", "output", {"check": SOURCES, "coverage": (), "plan": ()},
           kind="flag"),
)
BY_DEST = {o.dest: o for o in OPTIONS}


def for_command(command: str) -> list[Option]:
    return [o for o in OPTIONS if command in o.commands]


def add_arguments(parser: argparse.ArgumentParser, command: str,
                  groups: Mapping[str, argparse._ArgumentGroup] | None = None) -> dict[str, argparse._ArgumentGroup]:
    """Add ``command``'s options from the table, each in its group: ``groups`` maps an option's dest or a group's
    name to a group of the command's own; the table's group is created on ``parser`` otherwise. Returns the groups,
    so that the command adds its own options beside them."""
    found = dict(groups or {})
    for option in for_command(command):
        group = (found.get(option.dest) or found.get(option.group)
                 or found.setdefault(option.group, parser.add_argument_group(option.group)))
        kwargs: dict[str, Any] = {"dest": option.dest, "default": argparse.SUPPRESS, "help": option.help(command)}
        if option.kind == "flag":
            kwargs["action"] = "store_true"
        else:
            kwargs["action"] = "append" if option.kind == "append" else "store"
            kwargs["type"] = {"int": int, "float": float}.get(option.kind, str)
            if option.metavar:
                kwargs["metavar"] = option.metavar
        group.add_argument(*option.flags, **kwargs)
    return found


def given(args: argparse.Namespace, command: str) -> set[str]:
    """The table's options the user gave (their dests), read before ``apply_defaults``."""
    return {o.dest for o in for_command(command) if o.dest in vars(args)}


def apply_defaults(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """``args`` with every table option of ``command`` that was not given set to the command's default."""
    for option in for_command(command):
        if option.dest not in vars(args):
            setattr(args, option.dest, option.default(command))
    return args


def check_values(args: argparse.Namespace, command: str, dests: Iterable[str] | None = None) -> None:
    """Every numeric option of ``command`` (or those in ``dests``) in its range: a UsageError naming the first that is
    not (``nan`` and ``inf`` included)."""
    wanted = set(dests) if dests is not None else None
    bounds.check_all({o.name: (getattr(args, o.dest, None), o.bound) for o in for_command(command)
                      if o.bound is not None and (wanted is None or o.dest in wanted)})


def refuse_unused(gave: set[str], command: str, source: str) -> None:
    """A UsageError naming each given option that ``source`` does not read, with the reason and the fix."""
    unused = [o for o in for_command(command) if o.dest in gave and source not in o.commands[command]]
    if not unused:
        return
    reasons = "; ".join(f"{o.name}: {o.refusal or 'not read for this source'}" for o in unused)
    names = ", ".join(o.name for o in unused)
    raise UsageError(f"{names} {'does' if len(unused) == 1 else 'do'} not apply to {SOURCE_NAMES[source]}, so "
                     f"{'it' if len(unused) == 1 else 'they'} would be ignored: {reasons}.")


def markdown_table() -> str:
    """The table as Markdown (option, meaning, unit and range, where it applies): docs/check/cli.md holds it, written
    by tools/gen_options_doc.py and checked by the tests."""
    def where(o: Option) -> str:
        return "; ".join(f"{c} ({', '.join(s)})" if s else c for c, s in o.commands.items())

    rows = ["| option | meaning | unit and range | commands (sources) |", "|---|---|---|---|"]
    for o in OPTIONS:
        unit = ", ".join(filter(None, [o.unit, o.bound.describe() if o.bound else ""])) or "-"
        rows.append(f"| `{', '.join(o.flags)}` | {o.meaning.replace('|', '/')} | {unit} | {where(o)} |")
    return "\n".join(rows) + "\n"
