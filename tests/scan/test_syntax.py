"""Python's tree (`torchferry.scan.syntax`) answers as libcst did: the rules that moved to `ast` must
name, place and judge every node as before, and a gate must never keep libcst from a finding."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from torchferry.scan import engine
from torchferry.scan.engine import analyse
from torchferry.scan.rules import RULES
from torchferry.scan.sources import discover
from torchferry.scan.syntax import SourceTree

HERE = Path(__file__).parent
SOURCES = [p for p in discover([str(HERE / "corpus"), str(HERE / "data")]) if p.suffix == ".py"]

# Names whose meaning depends on scope, order and imports: each call's callee is compared below.
SCOPES = textwrap.dedent("""\
    a0()
    import torch.nn.functional
    import numpy as np
    from torch import where as W, nn
    th.zeros(1)
    import torch as th
    torch.nn.functional.relu(1)
    x = torch.zeros(1)
    x.nonzero()
    torch.zeros(3).nonzero()
    W(x)
    print(x); bool(x)
    def a0(): pass
    def f(y, torch=None):
        q.item()
        q = 1
        z = 1
        z.item(); y.item(); torch.where(y); np.array(y)
        import torch as th2
        th2.unique(y)
    class C(nn.Module):
        k = 1
        k.real()
        def forward(self, q):
            self.foo(q); q.bar(); int(q); k.real()
    def g():
        th2.where(1)
    float = 3
    float(x)
    [e.item() for e in x]
    (x + 1).item()
    x[0].nonzero()
    [e for e in range(3)].count()
""")


def _libcst_qualname(qualnames, node: cst.CSTNode) -> str | None:  # noqa: ANN001 - libcst's metadata mapping
    """The name libcst's QualifiedNameProvider gives `node` (the first, sorted), else the name as written."""
    names = qualnames.get(node, ())
    names = sorted(q.name for q in (names() if callable(names) else names))  # libcst computes them lazily
    if names:
        return names[0]
    return get_full_name_for_node(node) if isinstance(node, (cst.Name, cst.Attribute)) else None


def _libcst_callees(code: str) -> dict[tuple[int, int], str | None]:
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    qualnames = wrapper.resolve(QualifiedNameProvider)
    positions = wrapper.resolve(PositionProvider)
    found = {}

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            start = positions[node.func].start
            found[(start.line, start.column)] = _libcst_qualname(qualnames, node.func)

    wrapper.module.visit(_Calls())
    return found


def _ast_callees(code: str) -> dict[tuple[int, int], str | None]:
    tree = SourceTree(code, ast.parse(code))
    return {tree.start(node.func): tree.qualname(node.func) for node in tree.nodes() if isinstance(node, ast.Call)}


@pytest.mark.parametrize("code", [SCOPES, *(p.read_text() for p in SOURCES)], ids=["scopes", *(p.name for p in SOURCES)])
def test_every_callee_has_the_qualified_name_libcst_gives(code):
    expected = _libcst_callees(code)
    assert expected, "no call to compare"
    assert _ast_callees(code) == expected


def test_positions_count_characters_not_bytes():
    """ast counts columns in UTF-8 bytes; the report (like libcst) counts characters."""
    code = textwrap.dedent("""\
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                y = "é€"; print(x.nonzero()); return x.item()
    """)
    hits, _ = analyse(code, RULES, fix=False)
    line = code.splitlines()[3]
    assert [(h.rule.id, h.line, h.column) for h in hits] == [
        ("TF021", 4, line.index("print(x") + 1), ("TF020", 4, line.index("x.nonzero") + 1),
        ("TF021", 4, line.index("item()") + 1)]


def test_a_binding_that_leads_back_to_itself_is_no_tensor_and_no_crash():
    """`[x for x in x]` binds x to the x it iterates: judging it must stop (the libcst engine recursed forever)."""
    code = textwrap.dedent("""\
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                x = [x for x in x]
                if x:
                    return x
    """)
    hits, _ = analyse(code, RULES, fix=False)
    assert [h.rule.id for h in hits] == []


def test_a_source_whose_names_cannot_mean_a_libcst_rules_target_is_never_parsed_by_libcst(monkeypatch):
    """`json.load`, `re.compile`, a `forward` with tensor code: the words match prefilters, no gate passes."""
    code = textwrap.dedent("""\
        import json, re
        import torch
        cfg = json.load(open("c.json"))
        pattern = re.compile("x")
        class M(torch.nn.Module):
            def forward(self, x):
                return x.nonzero()
    """)

    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("libcst parsed a source without a libcst candidate")

    monkeypatch.setattr(engine.cst, "parse_module", refuse)
    hits, fixed = analyse(code, RULES, fix=True)
    assert [h.rule.id for h in hits] == ["TF020"] and fixed is None


def test_libcst_parses_a_source_only_to_write_its_fixes(monkeypatch):
    """Findings with a safe fix are reported, fixable, from Python's tree alone; libcst parses only for `fix`."""
    code = textwrap.dedent("""\
        import torch
        x = torch.ones(2).cuda()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    """)
    parsed = []
    real = engine.cst.parse_module

    def counted(source: str):  # noqa: ANN202 - libcst's Module
        parsed.append(source)
        return real(source)

    monkeypatch.setattr(engine.cst, "parse_module", counted)
    hits, fixed = analyse(code, RULES, fix=False)
    assert [(h.rule.id, h.hit.fix is not None) for h in hits] == [("TF001", True), ("TF003", True), ("TF003", True)]
    assert fixed is None and parsed == []
    hits, fixed = analyse(code, RULES, fix=True)
    assert parsed == [code]
    assert "torch.accelerator.synchronize()" in fixed and ".to(torch.accelerator.current_accelerator())" in fixed


def test_a_gate_passes_through_an_import_alias_in_a_function():
    code = "def load(p):\n    from torch import load as read\n    return read(p)\n"
    hits, _ = analyse(code, RULES, fix=False)
    assert [h.rule.id for h in hits] == ["TF017"]
