"""Which code a machine without CUDA never runs: the branches only CUDA takes.

`if device.type == "cuda": model.cuda()` trains unchanged on any accelerator, which skips the
branch. A finding of a rule about CUDA-only code (TF001-TF018) in such a branch cannot fail there,
so it is reported as info, naming the branch (docs/scan.md, "Code only CUDA runs").

A node runs only with CUDA when the tests on the way to it cannot all pass on a machine without
CUDA. The tests are those of the `if`/`elif`/`else` and `while` around it, of `a if t else b`, the
operands before it in `and`/`or`, a comprehension's `if`s, and earlier `if`s of its block that end
in `return`/`continue`/`break` (not `raise` or `sys.exit()`: a script that stops there fails on
the other accelerator). They are evaluated with the CUDA facts false (`torch.cuda.is_available()`,
`torch.cuda.device_count()` 0, `x.is_cuda`, `==`/`in` with "cuda" or "nccl"), a name with what
this source assigns it, an attribute likewise only where that is a CUDA fact (it may be set
elsewhere too), and every other test free: the node runs only with CUDA when no choice of the
free tests passes them all, while some choice does once the CUDA facts are free too (otherwise
no machine runs it: dead code, not a guard). A CUDA flag (`args.cuda`, `opt.use_gpu`) is free
in a first pass; when only its default (argparse's, else unset) keeps the node from running, the
flag decides: a run given it reaches the node on any machine, so a finding there is at most a
warning.

A finding that picks where work runs (a "cuda" device, "nccl", `.cuda()`) in a branch that asks
whether the machine has CUDA (not one that compares a device already chosen), whose other branch
picks the CPU, keeps its severity: `torch.device("cuda" if torch.cuda.is_available() else "cpu")`
puts the script on the CPU of every other accelerator, without a word.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

from torchferry.report.scan import Guard, Severity
from torchferry.scan.syntax import SourceTree, full_name

DEVICE, FLAG = "device", "flag"  # Guard.decided_by
COMPARED, ASKED = "compared", "asked"  # the kinds of CUDA fact: `x == "cuda"`; torch.cuda.is_available(), .is_cuda
_CUDA_WORD = re.compile(r"(?i)cuda(:\d+)?|nccl")  # a string that names CUDA (a device, its process-group backend)
_CPU_WORD = re.compile(r"(?i)cpu|gloo")  # ... the CPU
_TARGET_WORD = re.compile(r"(?i)neuron(:\d+)?")  # ... the migration's target (TorchNeuron's device)
_FLAG = re.compile(r"(?i)(use_|with_|enable_)?(cuda|gpus?)")  # an attribute that asks for CUDA: args.cuda, opt.use_gpu
# torch calls and what they return on a machine without CUDA.
_CUDA_CALLS = {"torch.cuda.is_available": False, "torch.cuda.is_initialized": False, "torch.cuda.device_count": 0}
_EXITS = {ast.Return: "return", ast.Continue: "continue", ast.Break: "break"}  # leave a function or an iteration
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Is: lambda a, b: a is b,
            ast.IsNot: lambda a, b: a is not b, ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}
_MAX_RUNS = 256  # choices of the free tests tried per condition; past it the node counts as reachable
_QUOTED = 60  # characters of a test quoted in a message
# What the other branch's CPU choice does on an accelerator, by the word that makes it.
_CPU_OUTCOME = {"cpu": "picks the CPU, where the script then runs without a word",
                "gloo": 'picks "gloo", the CPU process-group backend, whose collectives fail on tensors of the '
                        'accelerator ("No backend type associated with device type")'}


class _Open(Exception):
    """A free test a condition needs: the search tries it both ways."""

    def __init__(self, key: object) -> None:
        super().__init__(key)
        self.key = key


@dataclass(frozen=True)
class _Branch:
    """One place on the way to a node where tests decide whether it runs."""

    point: ast.AST  # the if / while / conditional expression / boolean operation / comprehension
    test: ast.AST  # the test quoted for it
    where: str  # where the node sits there, for the message: "in `if x`", "after `if x: return`" ...
    conditions: tuple[tuple[ast.expr, bool], ...]  # (test, the truth it needs for the node to run)
    other: tuple[ast.AST, ...] = ()  # what runs at `point` instead of the node


class _Run:
    """The conditions evaluated on a machine without CUDA, with the free tests set as in `free`.

    CUDA facts (a comparison with "cuda", a question to torch.cuda, `.is_cuda`) are false, except the kinds in
    `open_facts`, which are free tests too.
    """

    def __init__(self, reach: Reach, world: str, free: dict[object, bool], flags: set[str],
                 open_facts: frozenset[str] = frozenset()) -> None:
        self.reach, self.world, self.free, self.flags, self.open_facts = reach, world, free, flags, open_facts
        self.visiting: set[str] = set()

    def truth(self, expr: ast.AST) -> bool:
        return bool(self.value(expr))

    def open(self, key: object) -> bool:
        if key in self.free:
            return self.free[key]
        raise _Open(key)

    def _fact(self, kind: str, expr: ast.AST, value: object) -> object:
        return self.open(ast.dump(expr)) if kind in self.open_facts else value

    def value(self, expr: ast.AST) -> object:
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return not self.truth(expr.operand)
        if isinstance(expr, ast.BoolOp):
            stop = isinstance(expr.op, ast.Or)  # `or` stops at the first true operand, `and` at the first false
            return stop if any(self.truth(v) is stop for v in expr.values) else not stop
        if isinstance(expr, ast.Compare):
            return self._compare(expr)
        if isinstance(expr, ast.Call):
            name = self.reach.qualname(expr.func)
            if name in _CUDA_CALLS:
                return self._fact(ASKED, expr, _CUDA_CALLS[name])
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr == "startswith" and len(expr.args) == 1 \
                    and _cuda_word(expr.args[0]):
                return self._fact(COMPARED, expr, False)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            return self._named(expr)
        return self.open(ast.dump(expr))

    def _compare(self, expr: ast.Compare) -> object:
        if len(expr.ops) != 1:
            return self.open(ast.dump(expr))
        op, left, right = expr.ops[0], expr.left, expr.comparators[0]
        # Nothing on a machine without CUDA is "cuda" (or uses "nccl"); what would be is reported where it is chosen.
        if (_cuda_word(right) and isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot))) or \
                (_cuda_word(left) and isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot, ast.In, ast.NotIn))):
            return self._fact(COMPARED, expr, isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)))
        try:
            a, b = self.value(left), self.value(right)
            return _COMPARE[type(op)](a, b)
        except (_Open, KeyError, TypeError):
            return self.open(ast.dump(expr))  # the comparison as a whole is the free test

    def _named(self, expr: ast.Name | ast.Attribute) -> object:
        if isinstance(expr, ast.Attribute) and expr.attr == "is_cuda":
            return self._fact(ASKED, expr, False)
        key = full_name(expr)
        values = self.reach.assigned.get(key)
        if values is None:
            return self._unassigned(expr, key)
        # Bound otherwise too (a parameter, a loop), or assigned from itself: free. An attribute may be set outside
        # this source too (a field, a parsed argument): what this source assigns it counts only when each value asks
        # about CUDA (`args.cuda = not args.no_cuda and torch.cuda.is_available()`).
        if key in self.visiting or any(v is None for v in values) or \
                (isinstance(expr, ast.Attribute) and not all(self.reach.asks_cuda(v) for v in values)):
            return self.open(key)
        self.visiting.add(key)
        try:
            found = [self.value(v) for v in values]
        finally:
            self.visiting.discard(key)
        if all(type(v) is type(found[0]) and v == found[0] for v in found[1:]):
            return found[0]
        return self.open(key)

    def _unassigned(self, expr: ast.Name | ast.Attribute, key: str) -> object:
        """A name this source never assigns: a CUDA flag (an attribute), or a free test."""
        # torch.version.cuda is no flag: it says how torch was built, not whether this machine has CUDA
        torch_name = (self.reach.qualname(expr) or "").startswith("torch.")
        if not (isinstance(expr, ast.Attribute) and _FLAG.fullmatch(expr.attr) and not torch_name):
            return self.open(key)
        if self.world == DEVICE:
            return self.open(("flag", key))
        self.flags.add(key)
        known, default, _ = self.reach.argparse_default(expr.attr)
        return default if known else self.open(("flag", key))


def _cuda_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_CUDA_WORD.fullmatch(node.value))


def _exits(block: list[ast.stmt]) -> str | None:
    """The keyword a block ends in when it leaves the enclosing function or loop iteration, else None."""
    return _EXITS.get(type(block[-1])) if block else None


def _cpu_choice(roots: tuple[ast.AST, ...]) -> tuple[int, str] | None:
    """(line, "cpu" | "gloo") of the first CPU choice under `roots`: a "cpu" / "gloo" string or a `.cpu()` call; None
    when the code there can choose the target too (`"neuron" if hasattr(torch, "neuron") else "cpu"`,
    `torch.accelerator.current_accelerator()`): its CPU is a machine with no accelerator, not a silent fallback."""
    found = []
    for root in roots:
        for node in ast.walk(root):
            if _names_target(node):
                return None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _CPU_WORD.fullmatch(node.value):
                found.append((node.lineno, node.value.lower()))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cpu":
                found.append((node.lineno, "cpu"))
    return min(found) if found else None


def _names_target(node: ast.AST) -> bool:
    """Whether `node` chooses the migration's target: a "neuron" device string, `torch.neuron`, or
    `torch.accelerator`, which finds whichever accelerator the machine has."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_TARGET_WORD.fullmatch(node.value))
    return isinstance(node, ast.Attribute) and full_name(node) in ("torch.neuron", "torch.accelerator")


class Reach:
    """One source's branches only CUDA takes (see the module docstring)."""

    def __init__(self, tree: SourceTree, qualname: Callable[[ast.AST], str | None]) -> None:
        self.tree = tree
        self.qualname = qualname

    @cached_property
    def assigned(self) -> dict[str, list[ast.expr | None]]:
        """Dotted name -> the values assigned to it anywhere in the source (None: bound another way)."""
        found: dict[str, list[ast.expr | None]] = {}
        for node in self.tree.nodes():
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                parent = self.tree.parent(node)
                single = (isinstance(parent, ast.Assign) and node in parent.targets) or \
                    (isinstance(parent, ast.AnnAssign) and parent.value is not None)
                found.setdefault(full_name(node), []).append(parent.value if single else None)
            elif isinstance(node, ast.arg):
                found.setdefault(node.arg, []).append(None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append(None)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    found.setdefault(alias.asname or alias.name.split(".", 1)[0], []).append(None)
        return found

    @cached_property
    def _arguments(self) -> dict[str, list[tuple[bool, object, tuple[str, ...]]]]:
        """argparse dest -> (default known, default, option strings) of each `add_argument` that declares it."""
        found: dict[str, list[tuple[bool, object, tuple[str, ...]]]] = {}
        for node in self.tree.nodes():
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            options = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            dest = keywords.get("dest")
            if isinstance(dest, ast.Constant):
                name = dest.value
            else:
                long = [o for o in options if o.startswith("--")] or list(options)
                name = long[0].lstrip("-").replace("-", "_") if long else None
            action = keywords.get("action")
            action = action.value if isinstance(action, ast.Constant) else None
            if isinstance(keywords.get("required"), ast.Constant) and keywords["required"].value:
                known, value = False, None  # always given: nothing to assume about a run without it
            elif "default" in keywords:
                default = keywords["default"]
                known, value = isinstance(default, ast.Constant), getattr(default, "value", None)
            else:
                known, value = True, {"store_true": False, "store_false": True}.get(action)
            if name:
                found.setdefault(name, []).append((known, value, options))
        return found

    def argparse_default(self, dest: str) -> tuple[bool, object, tuple[str, ...]]:
        """(known, value, options) of the flag `dest` on a command line without it: argparse's default where the
        source declares it (unknown when declared twice with different defaults), else None (unset)."""
        declared = self._arguments.get(dest, [])
        if not declared:
            return True, None, ()
        options = tuple(o for _, _, opts in declared for o in opts)
        known, value, _ = declared[0]
        same = all(k == known and type(v) is type(value) and v == value for k, v, _ in declared)
        return known and same, value, options

    def asks_cuda(self, expr: ast.AST) -> bool:
        """Whether `expr` holds a CUDA fact: a question to torch.cuda, `.is_cuda`, a comparison with "cuda"."""
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and self.qualname(node.func) in _CUDA_CALLS:
                return True
            if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
                return True
            if isinstance(node, ast.Compare) and any(map(_cuda_word, (node.left, *node.comparators))):
                return True
        return False

    # -- the branches on the way to a node -------------------------------------------------------

    def _quote(self, node: ast.AST) -> str:
        text = " ".join(self.tree.segment(node).split())
        return text if len(text) <= _QUOTED else text[:_QUOTED - 3] + "..."

    def _branches(self, node: ast.AST) -> Iterator[_Branch]:
        """The places that decide whether `node` runs, innermost first."""
        child = node
        for parent in self.tree.ancestors(node):
            yield from self._exits_before(child, parent)
            branch = self._branch(child, parent)
            if branch is not None:
                yield branch
            child = parent

    def _exits_before(self, child: ast.AST, parent: ast.AST) -> Iterator[_Branch]:
        """The `if`s before `child` in its block whose one branch leaves it (`if not cuda: return`)."""
        if not isinstance(child, ast.stmt):
            return
        block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody"))
                      if isinstance(b, list) and any(s is child for s in b)), None)
        if block is None:
            return
        index = next(i for i, s in enumerate(block) if s is child)
        for sibling in reversed(block[:index]):
            if not isinstance(sibling, ast.If):
                continue
            leaves, stays = _exits(sibling.body), _exits(sibling.orelse)
            if leaves and not stays:
                yield _Branch(sibling, sibling.test, f"after `if {self._quote(sibling.test)}: {leaves}`",
                              ((sibling.test, False),), tuple(sibling.body))
            elif stays and not leaves:
                yield _Branch(sibling, sibling.test, f"after the `else: {stays}` of `if {self._quote(sibling.test)}`",
                              ((sibling.test, True),), tuple(sibling.orelse))

    def _branch(self, child: ast.AST, parent: ast.AST) -> _Branch | None:
        """How `parent` decides whether `child` runs, if it does."""
        if isinstance(parent, (ast.If, ast.While)) and child is not parent.test:
            keyword = "while" if isinstance(parent, ast.While) else "elif" if self._is_elif(parent) else "if"
            test = self._quote(parent.test)
            if any(s is child for s in parent.body):
                return _Branch(parent, parent.test, f"in `{keyword} {test}`", ((parent.test, True),),
                               tuple(parent.orelse))
            if isinstance(parent, ast.If):
                return _Branch(parent, parent.test, f"in the `else` of `{keyword} {test}`", ((parent.test, False),),
                               tuple(parent.body))
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            test = self._quote(parent.test)
            if child is parent.body:
                return _Branch(parent, parent.test, f"in `... if {test} else ...`", ((parent.test, True),),
                               (parent.orelse,))
            return _Branch(parent, parent.test, f"in the `else` of `... if {test} else ...`",
                           ((parent.test, False),), (parent.body,))
        if isinstance(parent, ast.BoolOp):
            index = next(i for i, v in enumerate(parent.values) if v is child)
            if index:
                earlier = parent.values[index - 1]
                word = "and" if isinstance(parent.op, ast.And) else "or"
                return _Branch(parent, earlier, f"after `{self._quote(earlier)} {word}`",
                               tuple((v, word == "and") for v in parent.values[:index]))
        if isinstance(parent, _COMPREHENSIONS) and child not in parent.generators:
            tests = [t for g in parent.generators for t in g.ifs]
            if tests:
                return _Branch(parent, tests[-1], f"in a comprehension filtered by `if {self._quote(tests[-1])}`",
                               tuple((t, True) for t in tests))
        return None

    def _is_elif(self, node: ast.If) -> bool:
        parent = self.tree.parent(node)
        return (isinstance(parent, ast.If) and len(parent.orelse) == 1 and parent.orelse[0] is node
                and node.col_offset == parent.col_offset and node.lineno > parent.lineno)

    # -- deciding ----------------------------------------------------------------------------------

    def _never(self, conditions: list[tuple[ast.expr, bool]], world: str, flags: set[str],
               open_facts: frozenset[str] = frozenset()) -> bool:
        """Whether no choice of the free tests meets every condition on a machine without CUDA (`world`: CUDA flags
        free, DEVICE, or at their defaults, FLAG; `open_facts`: kinds of CUDA fact that are free tests too). Flags
        read are added to `flags`."""
        pending: list[dict[object, bool]] = [{}]
        for _ in range(_MAX_RUNS):
            if not pending:
                return True
            free = pending.pop()
            run = _Run(self, world, free, flags, open_facts)
            try:
                if all(run.truth(test) is wanted for test, wanted in conditions):
                    return False
            except _Open as needed:
                pending += [{**free, needed.key: False}, {**free, needed.key: True}]
        return False

    def guard(self, node: ast.AST, severity: Severity, picks_device: bool) -> tuple[Guard, Severity, str] | None:
        """The guard that keeps `node` off machines without CUDA, the severity of a finding there (that of the rule,
        `severity`, or lower) and a sentence saying why (the whole message of a silent CPU fallback, which does
        not fail as the rule says; one to add to the rule's otherwise); None when a machine without CUDA can run
        `node`.

        Where the machine decides, the finding is info, unless it `picks_device` and the other branch picks the CPU
        (a silent CPU fallback: the rule's severity). Where a flag decides, a run given the flag reaches it: at most
        a warning.
        """
        conditions: list[tuple[ast.expr, bool]] = []
        by_flag: tuple[_Branch, set[str]] | None = None
        for branch in self._branches(node):
            conditions.extend(branch.conditions)
            if self._never(conditions, DEVICE, set()):
                if self._never(conditions, DEVICE, set(), frozenset({COMPARED, ASKED})):
                    return None  # no machine runs it, with CUDA or without: dead code, not a branch only CUDA takes
                return self._by_device(node, branch, conditions, severity, picks_device)
            flags: set[str] = set()
            if by_flag is None and self._never(conditions, FLAG, flags):
                by_flag = branch, flags
        return self._by_flag(*by_flag, severity) if by_flag is not None else None

    def _by_device(self, node: ast.AST, branch: _Branch, conditions: list[tuple[ast.expr, bool]], severity: Severity,
                   picks_device: bool) -> tuple[Guard, Severity, str]:
        line = branch.point.lineno
        # A branch that compares a device already chosen (`if device.type == "cuda":`) chooses nothing itself: only one
        # that asks whether the machine has CUDA (`torch.cuda.is_available()`, a name set from it) picks a device.
        chooses = picks_device and self._never(conditions, DEVICE, set(), frozenset({COMPARED}))
        fallback = self._fallback(node, branch) if chooses else None
        guard = Guard(line=line, test=self._quote(branch.test), decided_by=DEVICE,
                      fallback_line=fallback[0] if fallback else None)
        if fallback is None:
            return guard, Severity.INFO, (f"Only a machine with CUDA runs it: it is {branch.where} (line {line}); "
                                          "every other accelerator skips it.")
        return guard, severity, (f"`{self._quote(node)}` is chosen only where CUDA is: {branch.where} (line {line}); "
                                 f"on any other accelerator the other branch (line {fallback[0]}) "
                                 f"{_CPU_OUTCOME[fallback[1]]}.")

    def _by_flag(self, branch: _Branch, flags: set[str], severity: Severity) -> tuple[Guard, Severity, str]:
        line = branch.point.lineno
        options = tuple(dict.fromkeys(o for f in sorted(flags) for o in self.argparse_default(f.rsplit(".", 1)[-1])[2]))
        guard = Guard(line=line, test=self._quote(branch.test), decided_by=FLAG, flags=tuple(sorted(flags)),
                      options=options)
        given = " / ".join(f"`{o}`" for o in options) or " / ".join(f"`{f}`" for f in sorted(flags))
        return guard, min(severity, Severity.WARNING, key=lambda s: s.rank), (
            f"Only a run given {given} reaches it: it is {branch.where} (line {line}); a run without the flag skips "
            "it on every machine.")

    def _fallback(self, node: ast.AST, branch: _Branch) -> tuple[int, str] | None:
        """Where the code a machine without CUDA runs instead of `node` picks the CPU: the other branch at the guard,
        or, when `node` is assigned to a name (`device = "cuda"`), another assignment to that name."""
        found = _cpu_choice(branch.other)
        if found is not None:
            return found
        child = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, ast.Assign) and child is parent.value and len(parent.targets) == 1:
                key = full_name(parent.targets[0]) if isinstance(parent.targets[0], (ast.Name, ast.Attribute)) else None
                others = [v for v in self.assigned.get(key, []) if v is not None and v is not parent.value]
                return _cpu_choice(tuple(others))
            if not isinstance(parent, (ast.expr, ast.keyword)):
                return None
            child = parent
        return None
