"""Coverage suites: the model families a sweep measures (``ferry coverage --suite NAME``).

Each module declares one family: its architectures (from transformers' auto-model mappings,
or tiny configs in code for diffusers), how to build one tiny with random weights, its inputs,
how to judge its output and its modes (torchferry.coverage.suites.base). Modules are imported
on use only: the parent process of a sweep never imports torch, transformers or diffusers for
a listing it does not need. The modules: ``base`` (the Suite type), ``causal_lm``, ``seq2seq``,
``encoder``, ``vision``, ``diffusers``.
"""

from __future__ import annotations

import importlib

from torchferry.coverage.suites.base import Suite
from torchferry.errors import UsageError
from torchferry.report.coverage import DEFAULT_SUITE

MODULES = {"causal-lm": "causal_lm", "seq2seq": "seq2seq", "encoder": "encoder", "vision": "vision",
           "diffusers": "diffusers"}
NAMES = tuple(MODULES)
DEFAULT = DEFAULT_SUITE

__all__ = ["DEFAULT", "NAMES", "Suite", "get", "parse"]


def get(name: str) -> Suite:
    """The suite of a name (its module imported now)."""
    return importlib.import_module(f"{__name__}.{MODULES[name]}").SUITE


def parse(text: str) -> tuple[str, ...]:
    """``--suite`` as given: one name, a comma-separated list, or ``all``; a usage error names the valid ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return NAMES
    bad = [n for n in names if n not in MODULES]
    if bad or not names:
        raise UsageError(f"--suite {text!r}: unknown suite {', '.join(map(repr, bad)) or '(none given)'}; "
                         f"valid: {', '.join(NAMES)}, or all (comma-separate several).")
    return tuple(dict.fromkeys(names))
