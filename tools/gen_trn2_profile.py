"""Generate the `trn2` profile's op tables from TorchNeuron's public source.

The built-in `neuron` device predicts which ATen ops real TorchNeuron runs on the
NeuronCore and which it runs on the host CPU. That prediction must come from the
source, not from memory, so this script reads a checkout of the torch-neuronx
tree (the public snapshot `parmoham-aws/test-repo-parmoham`, commit 98154b8) and
writes `torchferry/device/profiles/trn2_ops.toml`:

- `[native]`: ops with a PrivateUse1 kernel that runs on the device: `@neuron_op`
  family decorators and torch-mlir `@register_aten` in `torch_neuronx/python_ops/**`
  (the modules `auto_registration.discover_all_implementations` imports: it skips
  `.legacy`, `.jax` and `test` modules), the explicit `aten_lib.impl(...,
  "PrivateUse1")` calls of `python_ops/__init__.py`, and the C++
  `TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)` registrations whose kernel stays on
  the device.
- `[cpu_fallback]`: ops registered as explicit CPU fallbacks: the list in
  `python_ops/cpu_fallback_registrations.py`, and C++ kernels whose body copies to
  `at::kCPU` (TensorShape.cpp's `select_backward`, `argsort.stable`).
- `[metadata]`: ops TorchNeuron treats as metadata only (never a kernel launch):
  `VIEW_OPS_WHITELIST` in `csrc/core/NeuronBindings.cpp`, which its CPU fallback
  does not report.
- `[not_registered]`: names the source decorates that do not register on this
  torch (no such overload, or a backend whose registration is never called), with
  the reason, so that every decision is visible.

Every entry names the source file. Run it again when the snapshot moves:

    python tools/gen_trn2_profile.py --source /work/.mirror/parmoham-aws+test-repo-parmoham/repo

It needs only git and the installed torch (for the ATen schema names); nothing from
the snapshot is imported or executed.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = "github.com/parmoham-aws/test-repo-parmoham"
OUTPUT = Path(__file__).resolve().parents[1] / "torchferry" / "device" / "profiles" / "trn2_ops.toml"

PYTHON_OPS = "torch_neuronx/python_ops/"
DECORATORS = {"neuron_op", "neuron_unary_op", "neuron_binary_op", "neuron_reduction_op", "neuron_comparison_op",
              "register_aten"}
CPU_FALLBACK_FILE = "torch_neuronx/python_ops/cpu_fallback_registrations.py"
BINDINGS_FILE = "torch_neuronx/csrc/core/NeuronBindings.cpp"


@dataclass
class Tables:
    native: dict[str, str] = field(default_factory=dict)
    cpu_fallback: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    not_registered: dict[str, str] = field(default_factory=dict)


class Snapshot:
    """Read-only access to one commit of a git repository."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        self.git_dir = git_dir
        self.commit = self._git("rev-parse", commit).strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.git_dir), *args], check=True, capture_output=True,
                              text=True).stdout

    def files(self, prefix: str) -> list[str]:
        return [p for p in self._git("ls-tree", "-r", "--name-only", self.commit).splitlines() if p.startswith(prefix)]

    def read(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{path}")


def discovered(path: str) -> bool:
    """Whether `auto_registration.discover_all_implementations` imports this module."""
    module = path.removesuffix(".py").replace("/", ".")
    return not ("test" in module or ".legacy" in module or ".jax" in module)


def decorated_names(source: str) -> list[str]:
    """aten names of `@neuron_op(...)`-family and `@register_aten(...)` decorators."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and getattr(dec.func, "id", None) in DECORATORS and dec.args):
                continue
            arg = dec.args[0]
            values = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            names += [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return names


def impl_calls(source: str) -> list[str]:
    """Op names of `aten_lib.impl("name", fn, "PrivateUse1")` calls."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "impl"
                and len(node.args) >= 3 and all(isinstance(a, ast.Constant) for a in (node.args[0], node.args[2]))
                and node.args[2].value == "PrivateUse1"):
            names.append(node.args[0].value)
    return names


def qualified(name: str) -> str:
    return name if name.startswith("aten::") else f"aten::{name}"


def strip_cpp_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def cpp_registrations(text: str) -> list[tuple[str, str]]:
    """(op, kernel function) pairs of `TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)` blocks."""
    pairs = []
    for block in re.finditer(r"TORCH_LIBRARY_IMPL\(aten,\s*PrivateUse1,\s*m\)\s*\{(.*?)\n\}", text, flags=re.S):
        for m in re.finditer(r'm\.impl\(\s*"([^"]+)"\s*,\s*&?([\w:]+)', block.group(1)):
            pairs.append((m.group(1), m.group(2).split("::")[-1]))
    return pairs


def cpp_function_bodies(snapshot: Snapshot) -> dict[str, tuple[str, str]]:
    """Function name -> (body, file) for the kernels in csrc/aten."""
    bodies = {}
    for path in snapshot.files("torch_neuronx/csrc/aten/"):
        if not path.endswith(".cpp"):
            continue
        text = strip_cpp_comments(snapshot.read(path))
        for m in re.finditer(r"\n[\w:<>&\s]+?\b(\w+)\s*\([^;{]*\)\s*\{(.*?)\n\}", text, flags=re.S):
            bodies.setdefault(m.group(1), (m.group(2), path))
    return bodies


def generate(snapshot: Snapshot, aten_ops: set[str]) -> Tables:
    tables = Tables()

    def add_native(name: str, path: str) -> None:
        op = qualified(name)
        if op in aten_ops:
            tables.native.setdefault(op, path)
        else:
            tables.not_registered.setdefault(op, f"{path}: names no ATen overload of this torch, so the registration serves no op")

    for path in snapshot.files(PYTHON_OPS):
        if not path.endswith(".py") or path == CPU_FALLBACK_FILE:
            continue
        names = decorated_names(snapshot.read(path))
        for name in names:
            if discovered(path):
                add_native(name, path)
            else:
                why = ("its registry's finalize_registrations is never called and discovery skips .jax modules"
                       if "/jax/" in path else "discovery skips this module")
                tables.not_registered.setdefault(qualified(name), f"{path}: {why}")
    init = PYTHON_OPS + "__init__.py"
    for name in impl_calls(snapshot.read(init)):
        add_native(name, init)

    bodies = cpp_function_bodies(snapshot)
    for name, function in cpp_registrations(strip_cpp_comments(snapshot.read(BINDINGS_FILE))):
        body, path = bodies.get(function, ("", BINDINGS_FILE))
        op = qualified(name)
        if re.search(r"\.to\(at::kCPU\)|device\(at::kCPU\)", body):
            tables.cpu_fallback[op] = f"{path} ({function} computes on the CPU)"
        else:
            add_native(name, f"{path} ({function})")

    fallback = snapshot.read(CPU_FALLBACK_FILE)
    for name in re.findall(r'\(\s*"(\w+)",\s*torch\.ops\.aten\.', fallback):
        op = qualified(name)
        tables.native.pop(op, None)
        tables.cpu_fallback[op] = CPU_FALLBACK_FILE

    whitelist = re.search(r"VIEW_OPS_WHITELIST\s*=\s*\{(.*?)\};", strip_cpp_comments(snapshot.read(BINDINGS_FILE)),
                          flags=re.S)
    for name in re.findall(r'"(aten::[\w.]+)"', whitelist.group(1) if whitelist else ""):
        tables.metadata[name] = f"{BINDINGS_FILE} (VIEW_OPS_WHITELIST: metadata only, not reported as a fallback)"
    for op in tables.native:
        tables.not_registered.pop(op, None)
    return tables


def toml_table(name: str, entries: dict[str, str]) -> str:
    lines = [f"[{name}]"]
    lines += [f'"{op}" = "{entries[op]}"' for op in sorted(entries)]
    return "\n".join(lines)


def render(snapshot: Snapshot, tables: Tables, torch_version: str) -> str:
    header = f"""# GENERATED by tools/gen_trn2_profile.py; do not edit by hand. Regenerate with
#   python tools/gen_trn2_profile.py --source <git dir of {REPOSITORY}>
# What TorchNeuron (torch-neuronx) registers for PrivateUse1 at the snapshot below, op -> source file.
# The device counts every other op it executes as a predicted host fallback; see docs/device/fidelity.md.
source_repository = "{REPOSITORY}"
source_commit = "{snapshot.commit}"
torch_version = "{torch_version}"
"""
    body = "\n\n".join(toml_table(name, getattr(tables, name))
                       for name in ("native", "cpu_fallback", "metadata", "not_registered"))
    return header + "\n" + body + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="git dir of the torch-neuronx snapshot")
    parser.add_argument("--commit", default="98154b8", help="commit to read (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)

    import torch

    snapshot = Snapshot(args.source, args.commit)
    tables = generate(snapshot, set(torch._C._dispatch_get_all_op_names()))
    args.output.write_text(render(snapshot, tables, torch.__version__.split("+")[0]))
    print(f"{args.output}: {len(tables.native)} native, {len(tables.cpu_fallback)} CPU fallback, "
          f"{len(tables.metadata)} metadata, {len(tables.not_registered)} not registered "
          f"(snapshot {snapshot.commit[:7]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
