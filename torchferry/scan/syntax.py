"""Python's own syntax tree of one source (`ast`, parsed in C), with what rules ask of it, from one walk.

libcst keeps every space and comment, so that a fix can rewrite a file without touching the
rest; that costs ~15x Python's parser to build, and its metadata (parents, positions, scopes)
another ~10x. Detection needs none of it: this module answers the same questions on `ast`
(`parent`, `qualname`, `position`) so that a rule that writes no fix runs without libcst.

`qualname` follows libcst's `QualifiedNameProvider`, the rule the scan always used: the name a
node refers to after imports and aliases (`th.cuda.x` -> `torch.cuda.x` after `import torch as
th`), `builtins.x` for a builtin, `f.<locals>.x` for a local; several candidates -> the first in
sorted order; nothing bound -> the name as written (`get_full_name_for_node`).
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, cached_property

_BUILTINS = frozenset(dir(builtins))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ANYWHERE = 1 << 62  # a walk position after every binding
_SINGLETON_FIELDS = frozenset({"ctx", "op", "ops"})
# A string literal without prefix or escaped quote inside: the text of a node that is one literal (fast path).
_ONE_LITERAL = re.compile(r'"[^"\\\n]*"|\'[^\'\\\n]*\'')
_FROM = re.compile(r"from(?:[ \t\f]|\\\r?\n)*\.*(?:[ \t\f]|\\\r?\n)*")
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)  # Python >= 3.12 tokenizes f-strings in parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


def full_name(node: ast.AST) -> str | None:
    """The dotted name of a node as libcst's `get_full_name_for_node` spells it.

    `a.b.c` -> "a.b.c"; a call or subscript is named by what it calls or indexes
    (`torch.zeros(3).nonzero` -> "torch.zeros.nonzero"); an attribute of anything else is
    "None.attr", as libcst writes it.
    """
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{full_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return full_name(node.func)
    if isinstance(node, ast.Subscript):
        return full_name(node.value)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    return None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    """The `name=` argument of `call`, if given."""
    return next((k for k in call.keywords if k.arg == name), None)


def positional(call: ast.Call) -> list[ast.AST]:
    """The plain positional arguments of `call` (no `*args`, no keywords)."""
    return [a for a in call.args if not isinstance(a, ast.Starred)]


def has_unpacking(call: ast.Call) -> bool:
    """Whether `call` passes `*args` or `**kwargs` (arguments the scan cannot see)."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


class AttributeName:
    """The `name` of `value.name`, as a place to report (ast has no node for it; libcst has)."""

    __slots__ = ("attribute",)

    def __init__(self, attribute: ast.Attribute) -> None:
        self.attribute = attribute


@cache
def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of an ast class that can hold nodes the walk visits (`ast.iter_child_nodes` looks up all of them).

    `ctx` (Load/Store) and the operators are left out: they are shared singletons with no place in the source.
    """
    return tuple(f for f in kind._fields if f not in _SINGLETON_FIELDS)


class Literal:
    """One string literal as written: `"cu" "da"` is two (libcst's `SimpleString`s), which ast joins into one node.

    `value` is the literal's own tree (an `ast.Constant`, or an `ast.JoinedStr` for an f-string);
    `span` is where it is written, in characters.
    """

    __slots__ = ("value", "span")

    def __init__(self, value: ast.Constant | ast.JoinedStr, span: tuple[int, int, int, int]) -> None:
        self.value = value
        self.span = span


class ImportedName:
    """A dotted name in an import statement (`torch.cuda` of `from torch.cuda import x`), which ast keeps as a str.

    libcst has a node for it, and rules that walk a whole block see it there (named as written).
    """

    __slots__ = ("name", "span")

    def __init__(self, name: str, span: tuple[int, int, int, int]) -> None:
        self.name = name
        self.span = span


class _Scope:
    """One namespace: the module, a function or lambda, a class body, or a comprehension."""

    __slots__ = ("node", "parent", "prefix", "bindings", "is_class", "declared_global", "declared_nonlocal")

    def __init__(self, node: ast.AST, parent: _Scope | None, prefix: str) -> None:
        self.node = node
        self.parent = parent
        self.prefix = prefix  # libcst's name prefix: "", "f.<locals>", "C", "<comprehension>" ...
        self.bindings: dict[str, list[tuple[int, _Binding]]] = {}  # name -> (walk order, binding)
        self.is_class = isinstance(node, ast.ClassDef)
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()

    def bind(self, name: str, order: int, binding: _Binding) -> None:
        target = self
        if name in self.declared_global:
            while target.parent is not None:
                target = target.parent
        elif name in self.declared_nonlocal:
            target = self.parent
            while target is not None and (target.is_class or name not in target.bindings) and target.parent is not None:
                target = target.parent
        target.bindings.setdefault(name, []).append((order, binding))

    def child_prefix(self, name: str, kind: str) -> str:
        own = f"{name}.<locals>" if kind == "function" else name
        return f"{self.prefix}.{own}" if self.prefix else own


class _Binding:
    """What a name was bound to: an import (with its module and dotted name) or anything else."""

    __slots__ = ("prefix", "module", "imported", "alias")

    def __init__(self, scope: _Scope, module: str | None = None, imported: str | None = None,
                 alias: str | None = None) -> None:
        # The scope's prefix, not the scope: a binding kept in its scope must not point back at it (a cycle
        # would keep each source's whole tree alive until the cyclic garbage collector finds it).
        self.prefix = scope.prefix
        self.module = module  # `from MODULE import ...` ("" for `import ...`); None: not an import
        self.imported = imported  # the dotted name after `import`
        self.alias = alias

    def qualified(self, name: str, full: str) -> set[str]:
        """libcst's qualified names of `full` (whose first part is `name`) through this binding."""
        if self.module is None:
            return {f"{self.prefix}.{full}" if self.prefix else full}
        parts = self.imported.split(".")
        for length in range(len(parts), 0, -1):
            real = ".".join(parts[:length])
            shown = self.alias if self.alias is not None else real
            if self.module.endswith("."):
                real = f"{self.module}{real}"
            elif self.module:
                real = f"{self.module}.{real}"
            if full.startswith(shown):
                rest = full.split(shown, 1)[1]
                if rest and not rest.startswith("."):
                    continue
                rest = rest.lstrip(".")
                return {f"{real}.{rest}" if rest else real}
        return set()


class SourceTree:
    """One parsed source: each node's parent, scope and walk order, and the names bound in each scope."""

    def __init__(self, code: str, module: ast.Module) -> None:
        self.code = code
        self.module = module
        self._parents: dict[ast.AST, ast.AST | None] = {}
        self._order: dict[ast.AST, int] = {}
        self._scopes: dict[ast.AST, _Scope] = {}
        self._generator_scopes: dict[ast.comprehension, _Scope] = {}  # each `for` clause -> its comprehension's scope
        self._imports: dict[str, list[_Binding]] = {}  # name -> every import that binds it, in any scope
        self._imported_modules: set[str] = set()  # `import a.b` -> "a.b"; `from a.b import c` -> "a.b"
        self._walk()

    # -- the walk ------------------------------------------------------------------------------

    def _walk(self) -> None:
        root = _Scope(self.module, None, "")
        pending: list[tuple[ast.AST, ast.AST | None, _Scope]] = [(self.module, None, root)]
        order = 0
        parents, orders, scopes = self._parents, self._order, self._scopes
        while pending:
            node, parent, scope = pending.pop()
            parents[node] = parent
            orders[node] = order
            scopes[node] = scope
            order += 1
            children = self._children(node, scope, order)
            pending.extend(reversed(children))

    def _children(self, node: ast.AST, scope: _Scope, order: int) -> list[tuple[ast.AST, ast.AST, _Scope]]:
        """`node`'s children with the scope each is evaluated in; records the names `node` binds."""
        kind = type(node)
        if kind is ast.Name:
            if isinstance(node.ctx, ast.Store):
                scope.bind(node.id, order, _Binding(scope))
            return []
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            scope.bind(node.name, order, _Binding(scope))
            is_class = kind is ast.ClassDef
            inner = _Scope(node, scope, scope.child_prefix(node.name, "class" if is_class else "function"))
            out = [(d, node, scope) for d in node.decorator_list]
            if is_class:
                out += [(b, node, scope) for b in node.bases] + [(k, node, scope) for k in node.keywords]
            else:
                out.append((node.args, node, inner))
                if node.returns is not None:
                    out.append((node.returns, node, scope))
            out += [(s, node, inner) for s in node.body]
            return out
        if kind is ast.Lambda:
            inner = _Scope(node, scope, scope.child_prefix("<lambda>", "function"))
            return [(node.args, node, inner), (node.body, node, inner)]
        if kind is ast.arguments:
            outer = scope.parent if scope.parent is not None else scope
            out = []
            for arg in (*node.posonlyargs, *node.args, node.vararg, *node.kwonlyargs, node.kwarg):
                if arg is not None:
                    out.append((arg, node, scope))
            out += [(d, node, outer) for d in node.defaults]
            out += [(d, node, outer) for d in node.kw_defaults if d is not None]
            return out
        if kind is ast.arg:
            scope.bind(node.arg, order, _Binding(scope))
            outer = scope.parent if scope.parent is not None else scope
            return [(node.annotation, node, outer)] if node.annotation is not None else []
        if kind in _COMPREHENSIONS:
            inner = _Scope(node, scope, scope.child_prefix("<comprehension>", "class"))
            out = []
            for index, generator in enumerate(node.generators):
                self._generator_scopes[generator] = inner
                out.append((generator, node, inner if index else scope))
            elements = [node.key, node.value] if kind is ast.DictComp else [node.elt]
            return [(e, node, inner) for e in elements] + out
        if kind is ast.comprehension:
            # Only the first iterable is evaluated outside; its target and conditions are the comprehension's.
            inner = self._generator_scopes.pop(node)
            return ([(node.target, node, inner), (node.iter, node, scope)] + [(i, node, inner) for i in node.ifs])
        if kind is ast.Import or kind is ast.ImportFrom:
            module = "" if kind is ast.Import else "." * node.level + (node.module or "")
            if kind is ast.ImportFrom and node.module and not node.level:
                self._imported_modules.add(node.module)
            for alias in node.names:
                if kind is ast.Import:
                    self._imported_modules.add(alias.name)
                if alias.name == "*":
                    continue
                bound = alias.asname or (alias.name.split(".", 1)[0] if kind is ast.Import else alias.name)
                binding = _Binding(scope, module, alias.name, alias.asname)
                scope.bind(bound, order, binding)
                self._imports.setdefault(bound, []).append(binding)
            return []
        if kind is ast.Global:
            scope.declared_global.update(node.names)
            return []
        if kind is ast.Nonlocal:
            scope.declared_nonlocal.update(node.names)
            return []
        if kind is ast.ExceptHandler and node.name:
            scope.bind(node.name, order, _Binding(scope))
        if kind is ast.NamedExpr:
            target_scope = scope
            while target_scope.parent is not None and isinstance(target_scope.node, _COMPREHENSIONS):
                target_scope = target_scope.parent
            target_scope.bind(node.target.id, order, _Binding(target_scope))
            return [(node.value, node, scope)]
        out = []
        for field in _child_fields(kind):
            value = getattr(node, field, None)
            if isinstance(value, list):
                out.extend((item, node, scope) for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                out.append((value, node, scope))
        return out

    # -- queries -------------------------------------------------------------------------------

    def nodes(self) -> Iterator[ast.AST]:
        """Every node, parents before children, in source order."""
        return iter(self._order)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        """The nodes enclosing `node`, innermost first."""
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def order(self, node: ast.AST) -> int:
        return self._order[node]

    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name `node` refers to, as libcst's QualifiedNameProvider names it (see the module docstring)."""
        written = full_name(node)
        if written is None:
            return None
        name = written.split(".", 1)[0]
        scope = self._scopes.get(node)
        if scope is None:
            return written
        # A bare name sees only the bindings before it in its own scope; libcst resolves dotted names
        # (`th.zeros`) against every binding of their first part.
        found = self._referents(name, scope, self._order[node] if isinstance(node, ast.Name) else _ANYWHERE)
        names = sorted({q for binding in found for q in binding.qualified(name, written)}) if found else []
        if names:
            return names[0]
        if not found and name in _BUILTINS and not self._bound_anywhere(name, scope):
            return f"builtins.{name}"
        return written

    def _referents(self, name: str, scope: _Scope, order: int) -> list[_Binding]:
        """The bindings a use of `name` at walk position `order` in `scope` can see."""
        current, first = scope, True
        while current is not None:
            if not (current.is_class and not first):
                entries = current.bindings.get(name)
                if entries:
                    if first:
                        earlier = [b for o, b in entries if o < order]
                        if earlier:
                            return earlier
                        if current.parent is None:
                            return []
                    else:
                        return [b for _, b in entries]
            first = False
            current = current.parent
        return []

    def _bound_anywhere(self, name: str, scope: _Scope) -> bool:
        current, first = scope, True
        while current is not None:
            if (first or not current.is_class) and name in current.bindings:
                return True
            first = False
            current = current.parent
        return False

    @cached_property
    def _names_referable(self) -> frozenset[str]:
        """Every dotted name (and each of its prefixes) that a name in this source can mean, whatever its scope.

        A superset of what `qualname` (and libcst's) gives any node: the name as written, and the
        name through every import of its first part, anywhere in the source; plus the modules imported.
        """
        found: set[str] = set(self._imported_modules)
        parents = self._parents
        for node in self._order:
            if not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            parent = parents[node]
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue  # a prefix of a longer chain: the chain adds it
            written = full_name(node)
            found.add(written)
            root = written.split(".", 1)[0]
            for binding in self._imports.get(root, ()):
                found |= binding.qualified(root, written)
        prefixes = set()
        for name in found:
            parts = name.split(".")
            prefixes.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        return frozenset(prefixes)

    def can_refer_to(self, names: tuple[str, ...]) -> bool:
        """Whether some name in this source can mean one of `names` (or a name under one: "torch.jit" ~ "torch.jit.x")."""
        referable = self._names_referable
        return any(name in referable for name in names)

    @cached_property
    def _lines(self) -> list[str]:
        return _NEWLINE.split(self.code)

    def column(self, line: int, byte_offset: int) -> int:
        """The 0-based column in characters of a UTF-8 byte offset on 1-based `line` (ast counts bytes)."""
        text = self._lines[line - 1]
        return byte_offset if text.isascii() else len(text.encode("utf-8")[:byte_offset].decode("utf-8", "replace"))

    def start(self, node: ast.AST | AttributeName | Literal | ImportedName) -> tuple[int, int]:
        """(1-based line, 0-based character column) where `node` starts."""
        if isinstance(node, (Literal, ImportedName)):
            return node.span[:2]
        if isinstance(node, AttributeName):
            attribute = node.attribute
            end = attribute.end_col_offset - len(attribute.attr.encode("utf-8"))
            return attribute.end_lineno, self.column(attribute.end_lineno, end)
        return node.lineno, self.column(node.lineno, node.col_offset)

    def span(self, node: ast.AST | Literal) -> tuple[int, int, int, int]:
        """(line, column, end line, end column) of `node`, columns in characters: libcst's `PositionProvider` range."""
        if isinstance(node, Literal):
            return node.span
        return (*self.start(node), node.end_lineno, self.column(node.end_lineno, node.end_col_offset))

    def literals(self, node: ast.Constant | ast.JoinedStr) -> list[Literal]:
        """The string literals written where ast has the one string `node` (`"cu" "da"` -> two, `"cuda"` -> one)."""
        line, column, _, _ = span = self.span(node)
        text = self.segment(node)
        if _ONE_LITERAL.fullmatch(text):
            return [Literal(node, span)]  # the common case, without tokenizing: no prefix, escape or second literal
        # Tokenized inside parentheses, so that literals on several lines read as one expression.
        ends, start, depth = [], None, 0
        for token in tokenize.generate_tokens(io.StringIO(f"({text})").readline):
            if token.type == _FSTRING_START:
                start = start if depth else token.start
                depth += 1
            elif token.type == _FSTRING_END:
                depth -= 1
            if not depth and token.type in (tokenize.STRING, _FSTRING_END):  # not a string inside an f-string
                ends.append((token.start if token.type == tokenize.STRING else start, token.end))

        def place(row: int, col: int) -> tuple[int, int]:
            return (line, column + col - 1) if row == 1 else (line + row - 1, col)

        pieces = []
        for (first_row, first_col), (last_row, last_col) in ends:
            rows = f"({text})".split("\n")[first_row - 1:last_row]
            rows[-1] = rows[-1][:last_col]
            rows[0] = rows[0][first_col:]
            pieces.append(Literal(ast.parse("\n".join(rows), mode="eval").body,
                                  (*place(first_row, first_col), *place(last_row, last_col))))
        return pieces

    def written_strings(self, node: ast.Constant | ast.JoinedStr) -> list[Literal]:
        """`literals`, where libcst has string nodes: none for the text between an f-string's placeholders, or its
        format spec (ast gives both as strings of their own)."""
        parent = self._parents.get(node)
        if isinstance(parent, ast.JoinedStr) or (isinstance(parent, ast.FormattedValue) and node is parent.format_spec):
            return []
        return self.literals(node)

    def string_literal(self, node: ast.AST) -> ast.Constant | None:
        """`node` when it is one string (or bytes) literal, as libcst's `SimpleString` (not `"a" "b"`, no f-string)."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))):
            return None
        return node if len(self.literals(node)) == 1 else None

    def imported_names(self, node: ast.Import | ast.ImportFrom) -> list[ImportedName]:
        """The dotted names an import statement spells out: each module of `import`, the module of `from`."""
        if isinstance(node, ast.Import):
            return [ImportedName(alias.name, self.span(alias)) for alias in node.names]
        if not node.module:
            return []
        return [ImportedName(node.module, (*self._module_start(node), node.end_lineno, node.end_col_offset))]

    def _module_start(self, node: ast.ImportFrom) -> tuple[int, int]:
        """(line, character column) where the module of `from MODULE import ...` is written (ast does not say)."""
        line, column = self.start(node)
        text = self.segment(node)
        skipped = _FROM.match(text).group(0)
        rows = skipped.count("\n")
        return (line + rows, column + len(skipped)) if not rows else (line + rows, len(skipped.rsplit("\n", 1)[1]))

    def segment(self, node: ast.AST) -> str:
        """The source text of `node` (without the parentheses around it)."""
        lines = [line.encode("utf-8") for line in self._lines[node.lineno - 1:node.end_lineno]]
        if len(lines) == 1:
            return lines[0][node.col_offset:node.end_col_offset].decode("utf-8", "replace")
        lines[0], lines[-1] = lines[0][node.col_offset:], lines[-1][:node.end_col_offset]
        return b"\n".join(lines).decode("utf-8", "replace")

    def parenthesized(self, node: ast.Tuple) -> bool:
        """Whether a tuple is written in parentheses (`t[(a, b)]`), not bare (`t[a, b]`, `t[(a), b]`).

        A parenthesized tuple's text starts with the "(" that its last character closes.
        """
        text = self.segment(node)
        if not text.startswith("("):
            return False
        depth = 0
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.OP and token.string in "([{":
                    depth += 1
                elif token.type == tokenize.OP and token.string in ")]}":
                    depth -= 1
                    if depth == 0:
                        return token.end == (text.count("\n") + 1, len(text.rsplit("\n", 1)[-1]))
        except (tokenize.TokenError, SyntaxError):
            return False
        return False


@dataclass(frozen=True)
class _RefersTo:
    names: tuple[str, ...]

    def __call__(self, tree: SourceTree) -> bool:
        return tree.can_refer_to(self.names)


def refers_to(*names: str) -> Callable[[SourceTree], bool]:
    """A rule's `gate`: the source can refer to one of `names` (a rule that compares qualified names with them).

    A value, not a closure, so that rules travel to `--jobs` worker processes.
    """
    return _RefersTo(names)
