"""Run the rules that can fire in one source on Python's tree, then apply the safe fixes in one rewrite.

Cheap first: a rule's `prefilter` (a pattern every source it can report in contains) picks
the rules worth running on a source, and its `gate` (a test on Python's tree, such as "a name
here can mean `torch.load`") drops those that still cannot fire.

Detection runs on Python's own tree (`syntax.SourceTree`: parsed in C; parents, positions and
names from one walk), through `AstContext`, and decides there whether each finding has a safe
fix. libcst, whose tree keeps every space and comment so that a rewrite changes nothing else,
parses a source only to write fixes (`--fix`, `--diff`) where one applies: a fix is a function
on the libcst node at the same place as its target on Python's tree (the same kind of node,
the same span; both trees place a node without its parentheses).
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from torchferry.report.scan import Guard, Hit, Rule, Severity
from torchferry.scan.reach import Reach
from torchferry.scan.regions import Regions
from torchferry.scan.syntax import AttributeName, ImportedName, Literal, SourceTree
from torchferry.scan.tensors import Tensors


class AstContext:
    """What the rules on Python's tree ask about one source: names, parents, regions and tensors."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.module = tree.module
        self.parent = tree.parent
        self.parenthesized = tree.parenthesized
        self.memo: dict[object, object] = {}  # what a rule finds once per source (keys name the rule and the question)
        self._qualnames: dict[object, str | None] = {}

    def qualname(self, node: ast.AST | ImportedName) -> str | None:
        """`SourceTree.qualname`, once per node (several rules ask it of every name); an imported name as written."""
        try:
            return self._qualnames[node]
        except KeyError:
            name = node.name if isinstance(node, ImportedName) else self.tree.qualname(node)
            self._qualnames[node] = name
            return name

    def is_outermost(self, node: ast.AST | ImportedName) -> bool:
        """True unless `node` is the `x` of a longer chain `x.attr` (so a chain is reported once)."""
        parent = self.tree.parent(node)
        return not (isinstance(parent, ast.Attribute) and parent.value is node)

    def called(self, node: ast.AST) -> ast.Call | None:
        """The call `node(...)`, when `node` is what a call calls."""
        parent = self.tree.parent(node)
        return parent if isinstance(parent, ast.Call) and parent.func is node else None

    def line(self, node: ast.AST | AttributeName | Literal | ImportedName) -> int:
        return self.tree.start(node)[0]

    @cached_property
    def regions(self) -> Regions:
        return Regions(self.tree)

    @cached_property
    def tensors(self) -> Tensors:
        return Tensors(self.tree, self.regions)

    @cached_property
    def reach(self) -> Reach:
        return Reach(self.tree, self.qualname)


@dataclass(frozen=True)
class RuleHit:
    """A hit with its rule, 1-based position, and how it is reported: severity, message, and the guard that keeps
    its code off machines without CUDA (None: every run can reach it)."""

    rule: Rule
    hit: Hit
    line: int
    column: int
    severity: Severity
    message: str
    guard: Guard | None = None


class _Fixer(cst.CSTTransformer):
    """Replaces each fix target, bottom-up, so a fix sees its children already fixed."""

    def __init__(self, fixes: dict[int, Hit]) -> None:
        super().__init__()
        self.fixes = fixes

    def on_leave(self, original_node, updated_node):  # noqa: ANN001, ANN201 - libcst's generic hook
        hit = self.fixes.get(id(original_node))
        return hit.fix(updated_node) if hit is not None else updated_node


@cache
def _pattern(prefilter: str) -> re.Pattern[str]:
    return re.compile(prefilter)


def candidate_rules(code: str, rules: Sequence[Rule]) -> list[Rule]:
    """The rules that can report something in `code`: those without a prefilter, and those whose prefilter matches."""
    return [rule for rule in rules if rule.prefilter is None or _pattern(rule.prefilter).search(code)]


def analyse(code: str, rules: Sequence[Rule], fix: bool, add_import: bool = True) -> tuple[list[RuleHit], str | None]:
    """Hits in `code`, sorted by position, and the fixed code (None unless `fix` and something changed).

    Fixes write `torch.` names, so `import torch` is added where missing, unless `add_import`
    is False (a notebook cell after one that imports torch).

    Raises `libcst.ParserSyntaxError` when neither Python's parser nor libcst can parse `code`
    (libcst's message, the same for every source), and `SyntaxError` naming this Python when only
    libcst accepts it (syntax of a newer Python): the rules read Python's tree, so such a source is
    reported as not scanned rather than as clean.
    """
    rules = candidate_rules(code, rules)
    module = _parse(code)
    if isinstance(module, Exception):
        cst.parse_module(code)
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise SyntaxError(f"Python {version}'s parser rejects it ({_parse_error(module)}), though it may be valid in a "
                          f"newer Python; run ferry scan under the Python this code targets")
    if not rules:
        return [], None
    tree = SourceTree(code, module)
    hits = sorted(_analyse(tree, [r for r in rules if r.gate is None or r.gate(tree)]), key=_position)
    fixing = [h for h in hits if h.hit.fix is not None] if fix else []
    return hits, (_fixed(code, tree, fixing, add_import) if fixing else None)


def _position(hit: RuleHit) -> tuple[int, int, str]:
    return hit.line, hit.column, hit.rule.id


def _parse(code: str) -> ast.Module | Exception:
    """Python's own tree of `code`, or why Python rejects it (or it nests too deep for the parser)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (invalid escapes ...) is the user's business
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return exc


def _parse_error(exc: Exception) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"line {exc.lineno}: {exc.msg}"
    return type(exc).__name__ if isinstance(exc, (RecursionError, MemoryError)) else str(exc) or type(exc).__name__


def _analyse(tree: SourceTree, rules: Sequence[Rule]) -> list[RuleHit]:
    """The hits of `rules`, in walk order."""
    if not rules:
        return []
    context = AstContext(tree)
    by_type: dict[type, list[Rule]] = {}
    for rule in rules:
        for node_type in rule.node_types:
            by_type.setdefault(node_type, []).append(rule)
    hits = []
    for node in tree.nodes():
        for rule in by_type.get(type(node), ()):
            for hit in rule.check(node, context):
                line, column = tree.start(hit.node)
                hits.append(_judged(rule, hit, node, context, (line, column + 1)))
    return hits


def _judged(rule: Rule, hit: Hit, checked: ast.AST, context: AstContext, where: tuple[int, int]) -> RuleHit:
    """`hit` as reported: below its rule's severity, naming the branch, where only a machine with CUDA runs the
    code a rule about CUDA-only code found (`checked`, the node the rule was called on; reach.py)."""
    severity, message = hit.severity or rule.severity, hit.message or rule.summary
    found = context.reach.guard(checked, severity, rule.picks_device and hit.severity is None) \
        if rule.tied_to_cuda else None
    if found is None:
        return RuleHit(rule, hit, *where, severity, message)
    guard, severity, why = found
    return RuleHit(rule, hit, *where, severity, why if guard.fallback_line is not None else f"{message} {why}", guard)


def _fixed(code: str, tree: SourceTree, fixing: list[RuleHit], add_import: bool) -> str:
    """`code` with the fixes of `fixing` (sorted by position: the first hit on a target fixes it) applied by libcst."""
    # The module is parsed here and never shared, so libcst's defensive deep copy is not needed.
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    nodes = _cst_nodes(wrapper, tree, [_target(h) for h in fixing])
    fixes: dict[int, Hit] = {}
    for rule_hit in fixing:
        fixes.setdefault(id(nodes[id(_target(rule_hit))]), rule_hit.hit)
    fixed = wrapper.module.visit(_Fixer(fixes))
    if not add_import:
        return fixed.code
    codemod = CodemodContext()
    AddImportsVisitor.add_needed_import(codemod, "torch")  # every fix expression starts with `torch.`
    return AddImportsVisitor(codemod).transform_module(fixed).code


def _target(rule_hit: RuleHit) -> object:
    """The node a hit's fix replaces."""
    return rule_hit.hit.target if rule_hit.hit.target is not None else rule_hit.hit.node


# The libcst node that stands where each kind of node a fix replaces on Python's tree stands.
_CST_KINDS = {ast.Call: cst.Call, ast.Attribute: cst.Attribute, ast.Name: cst.Name, Literal: cst.SimpleString}


def _cst_nodes(wrapper: MetadataWrapper, tree: SourceTree, targets: list[object]) -> dict[int, cst.CSTNode]:
    """id(target on Python's tree) -> the libcst node of the same kind with the same span."""
    wanted = {(_CST_KINDS[type(t)], tree.span(t)): t for t in targets}
    found = {}
    for node, where in wrapper.resolve(PositionProvider).items():
        target = wanted.get((type(node), (where.start.line, where.start.column, where.end.line, where.end.column)))
        if target is not None:
            found[id(target)] = node
    missing = [key for key, target in wanted.items() if id(target) not in found]
    if missing:
        raise LookupError(f"no libcst node for the fix targets {missing}: Python's tree and libcst's disagree there; "
                          "report it with the source")
    return found
