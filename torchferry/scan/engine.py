"""Walk one parsed source with the rules that can fire there, then apply the safe fixes in one rewrite.

Cheap first: a rule's `prefilter` (a pattern every source it can report in contains) picks
the rules worth running on a source; a source none of them can fire in is parsed only by
Python's own parser (to report a syntax error), never by libcst.

Two trees, each only where it is needed. A rule whose `node_types` are `ast` classes detects
on Python's own tree (`syntax.SourceTree`, parsed in C; parents, positions and names from one
walk), through `AstContext`: these rules write no fix, and they are the ones that need to
know where code runs (`regions`: forward, training step) and what holds a tensor (`tensors`),
so they run on nearly every model file. The other rules (those that write fixes, and the
import rules) see libcst nodes through `Context`, which answers the same questions with
libcst's metadata, each computed on first use; libcst parses a source only when one of them
is a candidate there: its prefilter matches, and its `gate` (a test on Python's tree, such as
"a name here can mean `torch.load`") passes.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, QualifiedNameProvider

from torchferry.report.scan import Hit, Rule
from torchferry.scan.regions import Regions
from torchferry.scan.syntax import AttributeName, ImportedName, Literal, SourceTree
from torchferry.scan.tensors import Tensors


class Context:
    """Metadata about one module that rules query while checking nodes."""

    def __init__(self, wrapper: MetadataWrapper) -> None:
        self.module = wrapper.module
        self._wrapper = wrapper
        self.memo: dict[object, object] = {}  # what a rule finds once per source (keys name the rule and the question)

    @cached_property
    def _qualnames(self):  # noqa: ANN202 - libcst's metadata mapping
        return self._wrapper.resolve(QualifiedNameProvider)

    @cached_property
    def _parents(self):  # noqa: ANN202 - libcst's metadata mapping
        return self._wrapper.resolve(ParentNodeProvider)

    @cached_property
    def positions(self):  # noqa: ANN201 - libcst's metadata mapping
        """Where each node starts and ends (1-based lines, 0-based columns)."""
        return self._wrapper.resolve(PositionProvider)

    def qualname(self, node: cst.CSTNode) -> str | None:
        """The dotted name `node` refers to (`th.cuda.x` -> `torch.cuda.x` after `import torch as th`).

        Without an import in this source (a later notebook cell) it is the name as written.
        """
        names = self._qualnames.get(node, ())
        names = sorted(q.name for q in (names() if callable(names) else names))  # libcst computes them lazily
        if names:
            return names[0]
        if isinstance(node, (cst.Name, cst.Attribute)):
            return get_full_name_for_node(node)
        return None

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(node)

    def is_outermost(self, node: cst.CSTNode) -> bool:
        """True unless `node` is the `x` of a longer chain `x.attr` (so a chain is reported once)."""
        parent = self.parent(node)
        return not (isinstance(parent, cst.Attribute) and parent.value is node)

    def called(self, node: cst.CSTNode) -> cst.Call | None:
        """The call `node(...)`, when `node` is what a call calls."""
        parent = self.parent(node)
        return parent if isinstance(parent, cst.Call) and parent.func is node else None


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


def is_ast_rule(rule: Rule) -> bool:
    """Whether `rule` detects on Python's own tree (its node types are `ast` classes) rather than on libcst's."""
    return issubclass(rule.node_types[0], ast.AST)


@dataclass(frozen=True)
class RuleHit:
    """A hit with its rule and 1-based position."""

    rule: Rule
    hit: Hit
    line: int
    column: int


class _Collector(cst.CSTVisitor):
    def __init__(self, context: Context, rules: Sequence[Rule]) -> None:
        self.context = context
        self.rules = rules
        self.hits: list[RuleHit] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        for rule in self.rules:
            if isinstance(node, rule.node_types):
                for hit in rule.check(node, self.context):
                    start = self.context.positions[hit.node].start
                    self.hits.append(RuleHit(rule, hit, start.line, start.column + 1))
        # Names inside import statements are declarations, not uses: only import rules see them.
        return not isinstance(node, (cst.Import, cst.ImportFrom))


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

    Raises `libcst.ParserSyntaxError` when neither Python's parser nor libcst can parse `code`.
    Where libcst accepts what Python rejects, the libcst rules still run there.
    """
    rules = candidate_rules(code, rules)
    module = _parse(code)
    if module is None:  # Python rejects it: libcst's error, or the libcst rules where libcst accepts it
        cst_rules = [r for r in rules if not is_ast_rule(r)]
        if not cst_rules:
            cst.parse_module(code)
            return [], None
        return _analyse_cst(code, cst_rules, [], None, fix, add_import)
    if not rules:
        return [], None
    tree = SourceTree(code, module)
    rules = [r for r in rules if r.gate is None or r.gate(tree)]
    hits = _analyse_ast(tree, [r for r in rules if is_ast_rule(r)])
    cst_rules = [r for r in rules if not is_ast_rule(r)]
    # libcst parses the source only for a libcst rule, or to write a fix that a rule on Python's tree found.
    if not cst_rules and not (fix and any(h.hit.fix is not None for h in hits)):
        return sorted(hits, key=_position), None
    return _analyse_cst(code, cst_rules, hits, tree, fix, add_import)


def _position(hit: RuleHit) -> tuple[int, int, str]:
    return hit.line, hit.column, hit.rule.id


def _parse(code: str) -> ast.Module | None:
    """Python's own tree of `code`, or None when Python rejects it (or it nests too deep for the parser)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (invalid escapes ...) is the user's business
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _analyse_ast(tree: SourceTree, rules: Sequence[Rule]) -> list[RuleHit]:
    """The hits of the rules that detect on Python's tree, in walk order."""
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
                hits.append(RuleHit(rule, hit, line, column + 1))
    return hits


def _analyse_cst(code: str, rules: Sequence[Rule], ast_hits: list[RuleHit], tree: SourceTree | None, fix: bool,
                 add_import: bool) -> tuple[list[RuleHit], str | None]:
    """The hits of the libcst rules with `ast_hits` (found on `tree`), and the fixed code."""
    # The module is parsed here and never shared, so libcst's defensive deep copy is not needed.
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    context = Context(wrapper)
    if rules:
        collector = _Collector(context, rules)
        wrapper.module.visit(collector)
        ast_hits = ast_hits + collector.hits
    hits = sorted(ast_hits, key=_position)
    fixing = [h for h in hits if h.hit.fix is not None] if fix else []
    if not fixing:
        return hits, None
    found_on_ast = [_target(h) for h in fixing if is_ast_rule(h.rule)]
    nodes = _cst_nodes(context, tree, found_on_ast) if found_on_ast else {}
    fixes: dict[int, Hit] = {}
    for rule_hit in fixing:
        target = _target(rule_hit)
        fixes.setdefault(id(nodes[id(target)] if is_ast_rule(rule_hit.rule) else target), rule_hit.hit)
    fixed = wrapper.module.visit(_Fixer(fixes))
    if not add_import:
        return hits, fixed.code
    codemod = CodemodContext()
    AddImportsVisitor.add_needed_import(codemod, "torch")  # every fix expression starts with `torch.`
    fixed = AddImportsVisitor(codemod).transform_module(fixed)
    return hits, fixed.code


def _target(rule_hit: RuleHit) -> object:
    """The node a hit's fix replaces."""
    return rule_hit.hit.target if rule_hit.hit.target is not None else rule_hit.hit.node


# The libcst node that stands where each kind of node a fix replaces on Python's tree stands.
_CST_KINDS = {ast.Call: cst.Call, ast.Attribute: cst.Attribute, ast.Name: cst.Name, Literal: cst.SimpleString}


def _cst_nodes(context: Context, tree: SourceTree, targets: list[object]) -> dict[int, cst.CSTNode]:
    """id(node on Python's tree) -> the libcst node of the same kind and the same span (both trees place a node
    without its parentheses)."""
    wanted = {(_CST_KINDS[type(t)], tree.span(t)): t for t in targets}
    found = {}
    for node, where in context.positions.items():
        key = (type(node), (where.start.line, where.start.column, where.end.line, where.end.column))
        target = wanted.get(key)
        if target is not None:
            found[id(target)] = node
    missing = [key for key in wanted if id(wanted[key]) not in found]
    if missing:
        raise LookupError(f"no libcst node for the fix targets {missing}: Python's tree and libcst's disagree there")
    return found
