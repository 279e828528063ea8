"""Generate TorchNeuron's `torch.neuron` contract from its public source, for the contract test.

The built-in `neuron` device offers TorchNeuron's user-visible contract; this script writes down
what that contract is, from the source, so that tests/device/test_neuron_contract.py can compare
every name with ours. It reads a checkout of the torch-neuronx tree (the public snapshot
`parmoham-aws/test-repo-parmoham`, commit 98154b8) and writes
`tests/device/data/torchneuron_contract.json`:

- `torch.neuron`: the module `torch_neuronx/__init__.py` registers with
  `torch._register_device_module("neuron", neuron)`, i.e. `torch_neuronx/neuron.py`: its
  top-level functions and classes and the submodules it imports (`memory`);
- `torch.neuron.memory`: `torch_neuronx/memory.py`;
- `torch_neuronx`: the public names of `torch_neuronx/__init__.py` (its own functions and
  classes, the names it imports from its submodules, and those submodules).

For each name: its kind (function, class, module), its parameters (name, kind, default as
source text) and the shape of what it returns: the return annotation, or, where there is none,
the annotation of the function it returns the result of (`return torch_neuronx.f(...)`,
`return current_stream().f(...)`), a literal's type, `None` for a function that returns
nothing, or the type its docstring's `Returns:` names. `NeuronCompilationMetrics` (the
records of `get_dynamo_metrics()`) comes with its fields. Run it again when the snapshot moves:

    python tools/gen_neuron_contract.py --source /work/.mirror/parmoham-aws+test-repo-parmoham/repo

Nothing from the snapshot is imported or executed; only git and the standard library are needed.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPOSITORY = "github.com/parmoham-aws/test-repo-parmoham"
OUTPUT = Path(__file__).resolve().parents[1] / "tests" / "device" / "data" / "torchneuron_contract.json"
FORMAT_VERSION = 1

PACKAGE = "torch_neuronx/"
NEURON_FILE = PACKAGE + "neuron.py"
INIT_FILE = PACKAGE + "__init__.py"
MEMORY_FILE = PACKAGE + "memory.py"
STREAMS_FILE = PACKAGE + "streams.py"
METRICS_FILE = PACKAGE + "neuron_dynamo_backend/metrics.py"
# Modules `torch_neuronx/__init__.py` imports that are not part of its API (the standard library, torch).
NOT_API = {"os", "threading", "torch", "inspect", "warnings"}


class Snapshot:
    """Read-only access to one commit of a git repository."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        self.git_dir = git_dir
        self.commit = self._git("rev-parse", commit).strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.git_dir), *args], check=True, capture_output=True,
                              text=True).stdout

    def tree(self, path: str) -> ast.Module:
        return ast.parse(self._git("show", f"{self.commit}:{path}"))


def parameters(node: ast.FunctionDef) -> list[dict[str, str]]:
    """(name, kind, default) of each parameter, `self`/`cls` left out; defaults as source text."""
    args = node.args
    out: list[dict[str, str]] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults):
        if arg.arg in ("self", "cls"):
            continue
        kind = "POSITIONAL_ONLY" if arg in args.posonlyargs else "POSITIONAL_OR_KEYWORD"
        out.append({"name": arg.arg, "kind": kind, "default": ast.unparse(default) if default else ""})
    if args.vararg:
        out.append({"name": args.vararg.arg, "kind": "VAR_POSITIONAL", "default": ""})
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": ast.unparse(default) if default else ""})
    if args.kwarg:
        out.append({"name": args.kwarg.arg, "kind": "VAR_KEYWORD", "default": ""})
    return out


def definitions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}


def docstring_return(node: ast.FunctionDef) -> str | None:
    """The type a Google-style `Returns:` section names first (`Returns:\\n    str: Device name`)."""
    match = re.search(r"Returns:\s*\n\s*([A-Za-z_][\w\[\], .]*?)(?::| containing| object|\n)", ast.get_docstring(node) or "")
    return match.group(1).strip() if match else None


class Resolver:
    """Finds the shape of what a function returns, following TorchNeuron's own delegations."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.init = definitions(snapshot.tree(INIT_FILE))
        self.imported: dict[str, ast.FunctionDef | ast.ClassDef] = {}
        for node in snapshot.tree(INIT_FILE).body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                module = definitions(snapshot.tree(PACKAGE + node.module.replace(".", "/") + ".py"))
                self.imported.update({a.asname or a.name: module[a.name] for a in node.names if a.name in module})
        self.stream_methods = methods(definitions(snapshot.tree(STREAMS_FILE))["Stream"])

    def target(self, name: str) -> ast.FunctionDef | ast.ClassDef | None:
        return self.init.get(name) or self.imported.get(name)

    def returns(self, node: ast.FunctionDef | ast.ClassDef) -> str:
        if isinstance(node, ast.ClassDef):
            return node.name
        if node.returns is not None:
            return ast.unparse(node.returns).strip("'\"")  # a quoted forward reference: its name
        values = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
        if not values:
            return "None"
        value = values[-1]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            owner, attr = value.func.value, value.func.attr
            if isinstance(owner, ast.Name) and owner.id == "torch_neuronx" and (found := self.target(attr)):
                return self.returns(found)
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "current_stream" \
                    and attr in self.stream_methods:
                return self.returns(self.stream_methods[attr])
        if isinstance(value, ast.Constant):
            return type(value.value).__name__
        if isinstance(value, (ast.List, ast.ListComp)):
            return "list"
        if isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "str"):
            return "str"
        return docstring_return(node) or "unknown"


def describe(node: ast.FunctionDef | ast.ClassDef, resolver: Resolver, path: str) -> dict[str, Any]:
    if isinstance(node, ast.ClassDef):
        own = methods(node)
        init = own.get("__new__") or own.get("__init__")
        return {"kind": "class", "parameters": parameters(init) if init else [], "returns": node.name,
                "source": f"{path}:{node.lineno}"}
    return {"kind": "function", "parameters": parameters(node), "returns": resolver.returns(node),
            "source": f"{path}:{node.lineno}"}


def module_contract(tree: ast.Module, path: str, resolver: Resolver, public_only: bool = True) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for name, node in definitions(tree).items():
        if not (public_only and name.startswith("_")):
            names[name] = describe(node, resolver, path)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                name = alias.asname or alias.name
                if node.module is None:  # `from . import memory`: a submodule
                    names[name] = {"kind": "module", "parameters": [], "returns": "", "source": f"{path}:{node.lineno}"}
                elif (found := resolver.target(name)) is not None and not name.startswith("_"):
                    names[name] = describe(found, resolver, PACKAGE + node.module.replace(".", "/") + ".py")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch_neuronx":  # neuron.py's `from torch_neuronx import memory`
            for alias in node.names:
                names[alias.asname or alias.name] = {"kind": "module", "parameters": [], "returns": "",
                                                     "source": f"{path}:{node.lineno}"}
    return dict(sorted(names.items()))


def metrics_record(snapshot: Snapshot) -> dict[str, Any]:
    node = definitions(snapshot.tree(METRICS_FILE))["NeuronCompilationMetrics"]
    fields = {n.target.id: ast.unparse(n.annotation) for n in node.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return {"name": node.name, "fields": fields, "source": f"{METRICS_FILE}:{node.lineno}"}


def generate(snapshot: Snapshot) -> dict[str, Any]:
    resolver = Resolver(snapshot)
    init = module_contract(snapshot.tree(INIT_FILE), INIT_FILE, resolver)
    for name in NOT_API:
        init.pop(name, None)
    return {
        "format_version": FORMAT_VERSION,
        "source_repository": REPOSITORY,
        "source_commit": snapshot.commit,
        "modules": {
            "torch.neuron": module_contract(snapshot.tree(NEURON_FILE), NEURON_FILE, resolver),
            "torch.neuron.memory": module_contract(snapshot.tree(MEMORY_FILE), MEMORY_FILE, resolver),
            "torch_neuronx": init,
        },
        "records": {"get_dynamo_metrics": metrics_record(snapshot)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="git dir of the torch-neuronx snapshot")
    parser.add_argument("--commit", default="98154b8", help="commit to read (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    contract = generate(Snapshot(args.source, args.commit))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(contract, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, args.output)
    counts = ", ".join(f"{module}: {len(names)} names" for module, names in contract["modules"].items())
    print(f"{args.output}: {counts} (snapshot {contract['source_commit'][:7]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
