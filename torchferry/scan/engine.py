"""Walk one parsed source with the rules that can fire there, then apply the safe fixes in one rewrite.

Cheap first: a rule's `prefilter` (a pattern every source it can report in contains) picks
the rules worth running on a source; a source none of them can fire in is never given to
libcst, whose parse and metadata cost a hundred times more than the text search.

Rules see nodes through `Context`, which answers the questions they ask: what a name
means (`qualname`, following imports and aliases), what encloses a node (`parent`), whether
an attribute chain is complete (`is_outermost`), where code runs (`regions`: forward,
training step) and what holds a tensor (`tensors`). Each is computed on first use, so a
source where no rule asks about names never pays for libcst's scope analysis.
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
from torchferry.scan.tensors import Tensors


class Context:
    """Metadata about one module that rules query while checking nodes."""

    def __init__(self, wrapper: MetadataWrapper) -> None:
        self.module = wrapper.module
        self._wrapper = wrapper

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

    @cached_property
    def regions(self) -> Regions:
        return Regions(self.module, self)

    @cached_property
    def tensors(self) -> Tensors:
        return Tensors(self)


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

    Raises `libcst.ParserSyntaxError` when libcst cannot parse `code`, and `SyntaxError` when
    no rule can fire in it and Python's own parser rejects it.
    """
    rules = candidate_rules(code, rules)
    if not rules:
        _check_syntax(code)
        return [], None
    # The module is parsed here and never shared, so libcst's defensive deep copy is not needed.
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    collector = _Collector(Context(wrapper), rules)
    wrapper.module.visit(collector)
    hits = sorted(collector.hits, key=lambda h: (h.line, h.column, h.rule.id))
    fixes: dict[int, Hit] = {}
    for rule_hit in hits:
        if rule_hit.hit.fix is not None:
            target = rule_hit.hit.target if rule_hit.hit.target is not None else rule_hit.hit.node
            fixes.setdefault(id(target), rule_hit.hit)
    if not (fix and fixes):
        return hits, None
    fixed = wrapper.module.visit(_Fixer(fixes))
    if not add_import:
        return hits, fixed.code
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "torch")  # every fix expression starts with `torch.`
    fixed = AddImportsVisitor(context).transform_module(fixed)
    return hits, fixed.code


def _check_syntax(code: str) -> None:
    """Raise libcst's error when `code` does not parse, at the cost of Python's own parser when it does.

    libcst is asked only when Python rejects the code (or nests too deep for it), so a source
    without candidates fails with the same message as any other; where libcst accepts what
    Python rejects, the scan accepts it too, as it always has. (A source that Python accepts
    and libcst would not is now reported clean rather than unparseable.)
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (invalid escapes ...) is the user's business
            ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        cst.parse_module(code)
