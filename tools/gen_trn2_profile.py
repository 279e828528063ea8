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

It also writes `torchferry/device/profiles/trn2_known_issues.toml`: the ops TorchNeuron's own
CI skips, with the vendor's reason, from `tests/vertical/skip_xfail_ops.py` and the
`skip_tests` of `tests/pytorch_tests/specs/*.json` (`known_issues()` below).

Every entry names the source file. Run it again when the snapshot moves:

    python tools/gen_trn2_profile.py --source /work/.mirror/parmoham-aws+test-repo-parmoham/repo

It needs only git and the installed torch (for the ATen schema names, and PyTorch's OpInfo
samples, run on the CPU to find the overloads the vendor's op tests reach); nothing from the
snapshot is imported or executed.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = "github.com/parmoham-aws/test-repo-parmoham"
OUTPUT = Path(__file__).resolve().parents[1] / "torchferry" / "device" / "profiles" / "trn2_ops.toml"
KNOWN_ISSUES_OUTPUT = OUTPUT.with_name("trn2_known_issues.toml")

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
    # registered torch-mlir op -> its static arguments (`static_arguments`), for the ops whose [native] source is there
    torch_mlir_static: dict[str, dict[str, list]] = field(default_factory=dict)


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


def static_arguments(source: str) -> dict[str, dict[str, list]]:
    """aten name -> the `static_argnums` and `static_argnames` of its `@register_aten(...)`: the arguments
    TorchNeuron's torch-mlir kernel keeps as Python values; it passes every other int as an int32 tensor
    (python_ops/processors/argument_processor.py, preprocess_inputs and preprocess_kwargs)."""
    found: dict[str, dict[str, list]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "register_aten" and dec.args):
                continue
            spec = {"argnums": [], "argnames": []}
            for keyword in dec.keywords:
                if keyword.arg in ("static_argnums", "static_argnames"):
                    value = ast.literal_eval(keyword.value)
                    spec[keyword.arg.removeprefix("static_")] = list(value if isinstance(value, (tuple, list))
                                                                     else (value,))
            arg = dec.args[0]
            for v in arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    found[qualified(v.value)] = spec
    return found


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
    for path in sorted({path for path in tables.native.values() if path.startswith(PYTHON_OPS + "torch_mlir/")}):
        for op, spec in static_arguments(snapshot.read(path)).items():
            if tables.native.get(op) == path and (spec["argnums"] or spec["argnames"]):
                tables.torch_mlir_static[op] = spec
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
    static = ["# The torch-mlir ops' static arguments (@register_aten static_argnums / static_argnames): kept as",
              "# Python values; the kernel passes every other int argument as an int32 tensor.",
              "[torch_mlir_static]"]
    static += [f'"{op}" = {{ argnums = {json.dumps(spec["argnums"])}, argnames = {json.dumps(spec["argnames"])} }}'
               for op, spec in sorted(tables.torch_mlir_static.items())]
    return header + "\n" + body + "\n\n" + "\n".join(static) + "\n"


# --- the vendor's known issues (tests/vertical/skip_xfail_ops.py and the spec skips) ------------

SKIP_XFAIL_FILE = "tests/vertical/skip_xfail_ops.py"
SPECS_DIR = "tests/pytorch_tests/specs/"
# The failing_test_methods/*.json lists are TorchNeuron's failures without a reason; they are
# the held-out evidence the device's fidelity is measured against, so nothing here reads them.

# Reason text -> kind, first match wins. `fails`: the op does not run (a compiler error, a crash);
# `slow`: it runs, but compiling or running it takes long enough that TorchNeuron's CI skips it;
# `accuracy`: it runs with results that differ from the CPU's; `test_only`: the skip is about the
# test harness, not the op, so it says nothing about a user's model (not warned about).
REASON_KINDS = (
    ("test_only", r"sample\.input is|uninitiali[sz]ed memory|random output"),
    ("fails", r"compilation error|broadcast_dimensions|out of bounds|segfault|segmentation fault|nan in output"
              r"|not on neuron device"),
    ("slow", r"long compilation|timeout"),
    ("accuracy", r"mismatch"),
)
# The dtypes a reason or a test name can scope a skip to (TorchNeuron's op tests run float32 and
# bfloat16, tests/vertical/neuron_op_db.py NEURON_DEFAULT_DTYPES; PyTorch's device-generic test names
# end in the dtype they run, test_x_neuron_bfloat16).
SCOPE_DTYPES = ("bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
                "complex64", "complex128")
# TorchNeuron's op tests run the OpInfos of PyTorch's op_db whose names it registers (and a few of its
# own) in float32 and bfloat16 only (tests/vertical/neuron_op_db.py, get_neuron_op_db and
# NEURON_DEFAULT_DTYPES): a skip there says nothing about other dtypes or other overloads.
OP_TEST_DTYPES = ("bfloat16", "float32")
# Spec files whose test names describe a scenario, not an op: their skips are listed, never mapped.
SCENARIO_SPEC_FOLDERS = ("dynamo/", "distributed/")


@dataclass
class KnownIssues:
    issues: dict[str, dict] = field(default_factory=dict)  # aten op -> reason, kind, scope, source, dtypes, overloads
    test_only: dict[str, str] = field(default_factory=dict)         # aten op -> why it is not warned about
    unobservable: dict[str, str] = field(default_factory=dict)      # aten op -> why the device never sees it
    reproduced: dict[str, str] = field(default_factory=dict)        # aten op -> why the host fails it the same way
    unmapped: dict[str, str] = field(default_factory=dict)          # vendor entry -> why no op is named


def reason_kind(reason: str) -> str:
    """The kind of a vendor skip reason; an unknown wording stops the generator (a decision to make)."""
    for kind, pattern in REASON_KINDS:
        if re.search(pattern, reason, flags=re.I):
            return kind
    raise SystemExit(f"unclassified skip reason {reason!r}: add it to REASON_KINDS in {Path(__file__).name}")


def dtypes_of(text: str) -> list[str]:
    """The dtypes a skip is scoped to, as the vendor's words name them, or [] (every dtype).

    A reason that names a dtype is about the runs in that dtype ("bfloat16 gradient mismatch"). In a
    comparison ("dtype mismatch bfloat16 vs float32") the dtype after "vs" is what the other side
    returned, not a dtype the test ran the op in: TorchNeuron's correctness test compares the CPU's
    result with the device's (tests/vertical/test_neuron_ops_correctness.py, assert_close(cpu_out,
    neuron_out)), and a float32 run gives float32 on both sides. A test name's dtype suffix
    (test_x_neuron_float64) scopes its skip the same way."""
    words = re.findall(r"(vs\.?\s+)?\b(" + "|".join(SCOPE_DTYPES) + r")\b", text)
    return sorted({dtype for versus, dtype in words if not versus})


def exercised(name: str) -> tuple[list[str], list[str]]:
    """(overloads, dtypes) the vendor's op tests of `name` ran: the ATen overloads named `name` that the
    samples of PyTorch's OpInfos of that name call, in the OpInfos' dtypes among OP_TEST_DTYPES (run here
    on the CPU; the dispatcher names the overload each sample reaches). ([], OP_TEST_DTYPES) for an op
    with no OpInfo of that name (the vendor's own extra op tests): every overload, its test dtypes."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    infos = [info for info in op_db if info.name == name]
    if not infos:
        return [], list(OP_TEST_DTYPES)
    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name == f"aten::{name}":
                seen.add(func._schema.name + ("" if func._overloadname == "default" else f".{func._overloadname}"))
            return func(*args, **(kwargs or {}))

    dtypes = sorted(d for d in OP_TEST_DTYPES if any(getattr(torch, d) in info.dtypes for info in infos))
    for info in infos:
        for dtype in dtypes:
            for sample in info.sample_inputs("cpu", getattr(torch, dtype)):
                with Record():
                    try:
                        info.op(sample.input, *sample.args, **sample.kwargs)
                    except Exception:  # noqa: BLE001 - an error sample still names the overload it reached
                        pass
    return sorted(seen), dtypes


def literal_dicts(source: str, names: tuple[str, ...]) -> dict[str, dict]:
    """The literal values of top-level `NAME: dict = {...}` assignments (read, never executed)."""
    found = {}
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id in names and node.value is not None:
            found[target.id] = ast.literal_eval(node.value)
    return found


def observable(op: str, aten_ops: set[str]) -> bool:
    """Whether some overload of `op` reaches the device's dispatch: it has a CPU kernel of its own
    (the device runs that) or no composite kernel (a backend must implement it)."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    overloads = [n for n in aten_ops if n == op or n.startswith(op + ".")]
    composite = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    return any(has(n, "CPU") or not any(has(n, k) for k in composite) for n in overloads)


def op_of_test(test: str, aten_ops: set[str]) -> str | None:
    """The ATen op a device-generic test names: an nn module in CamelCase (test_ReplicationPad2d_large ->
    aten::replication_pad2d) or its leading words (test_index_add_... -> aten::index_add), longest first."""
    words = re.sub(r"_neuron(_\w+)?$", "", test.removeprefix("test_")).split("_")
    candidates = [re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", w).lower() for w in words if re.match(r"[A-Z][a-z]", w)]
    candidates += ["_".join(words[:n]) for n in range(len(words), 0, -1)]
    for name in candidates:
        if any(o == f"aten::{name}" or o.startswith(f"aten::{name}.") for o in aten_ops):
            return f"aten::{name}"
    return None


def spec_skips(snapshot: Snapshot) -> list[tuple[str, str, str, str]]:
    """(spec file, class or test file, test name or pattern, reason) of every `skip_tests` entry."""
    rows = []
    for path in snapshot.files(SPECS_DIR):
        if not path.endswith(".json"):
            continue
        for config in json.loads(snapshot.read(path)).get("test_configurations", []):
            where = config.get("class") or config.get("file") or config.get("folder", "")
            scenario = str(config.get("file", config.get("folder", ""))).startswith(SCENARIO_SPEC_FOLDERS)
            for entry in config.get("skip_tests") or []:
                if "tests" in entry:  # {"reason": ..., "tests": [...]}
                    pairs = [(t, entry["reason"]) for t in entry["tests"]]
                else:  # {"test_name_or_pattern": {"reason": ...}, ...}
                    pairs = [(t, v["reason"]) for t, v in entry.items()]
                rows += [(path, f"{where} (scenario tests)" if scenario else where, t, r) for t, r in pairs]
    return rows


def bounds_checked_views(snapshot: Snapshot) -> dict[str, str]:
    """op -> kernel of TorchNeuron's C++ view kernels that run PyTorch's own storage bounds check
    (`at::native::checkInBoundsForStorage`, which the CPU's view kernels run too)."""
    bodies = cpp_function_bodies(snapshot)
    found = {}
    for name, function in cpp_registrations(strip_cpp_comments(snapshot.read(BINDINGS_FILE))):
        body, path = bodies.get(function, ("", ""))
        if "checkInBoundsForStorage" in body:
            found[qualified(name)] = f"{path} ({function})"
    return found


def known_issues(snapshot: Snapshot, aten_ops: set[str]) -> KnownIssues:
    """The ops TorchNeuron's own CI skips or expects to fail, with the reason and the source file."""
    found = KnownIssues()
    checked_views = bounds_checked_views(snapshot)

    def add(op: str, reason: str, scope: str, source: str, dtypes: list[str], overloads: list[str] = ()) -> None:
        kind = reason_kind(reason)
        if kind == "test_only":
            found.test_only[op] = f"{reason} ({scope}; {source}): about the test, not the op"
        elif re.search(r"out of bounds", reason, flags=re.I) and op in checked_views:
            # PyTorch itself calls such views (autograd, copies) on every device: warning on each use
            # would name an op the user never called, for an error the host raises as well.
            found.reproduced[op] = (f"{reason} ({scope}; {source}): TorchNeuron's kernel {checked_views[op]} runs "
                                    "PyTorch's own bounds check (at::native::checkInBoundsForStorage), as the "
                                    "host's does: an out-of-bounds view fails here as there")
        elif not observable(op, aten_ops):
            found.unobservable[op] = (f"{reason} ({scope}; {source}): every overload is a composite that PyTorch "
                                      "decomposes before the device sees it")
        else:
            previous = found.issues.get(op)
            if previous is None:
                found.issues[op] = {"reason": reason, "kind": kind, "scope": scope, "source": source, "dtypes": dtypes,
                                    "overloads": list(overloads)}
            else:  # one op skipped twice: keep each distinct reason, scope and file, the harder kind first
                for key, value in (("reason", reason), ("scope", scope), ("source", source)):
                    if value not in previous[key].split("; "):
                        previous[key] += f"; {value}"
                previous["kind"] = min(previous["kind"], kind, key=("fails", "slow", "accuracy").index)
                # every dtype unless both skips are scoped
                previous["dtypes"] = sorted(set(previous["dtypes"]) | set(dtypes)) if previous["dtypes"] and dtypes else []
                previous["overloads"] = (sorted(set(previous["overloads"]) | set(overloads))
                                         if previous["overloads"] and overloads else [])

    tables = literal_dicts(snapshot.read(SKIP_XFAIL_FILE), ("NEURON_SKIP_OPS", "NEURON_XFAIL_OPS"))
    for table, entries in sorted(tables.items()):
        verb = "skip" if table == "NEURON_SKIP_OPS" else "expected failure"
        for name, config in sorted(entries.items()):
            op = qualified(name)
            tests = config.get("tests")
            scope = f"{verb} in {', '.join(tests) if tests else 'every op test class'}"
            source = f"{SKIP_XFAIL_FILE} ({table})"
            if any(o == op or o.startswith(op + ".") for o in aten_ops):
                reason = config.get("reason") or verb
                overloads, dtypes = exercised(name)
                add(op, reason, scope, source, dtypes_of(reason) or dtypes, overloads)
            else:
                found.unmapped[f"{SKIP_XFAIL_FILE}: {name}"] = "names no ATen op of this torch"
    for path, where, test, reason in spec_skips(snapshot):
        key = f"{path}: {where}: {test}"
        if "(scenario tests)" in where:
            found.unmapped[key] = f"{reason}: a scenario test of {where.split(' ')[0]}, not an op test"
        elif not test.startswith("test_"):
            found.unmapped[key] = f"{reason}: a pattern over test names (a dtype or a family), not one op"
        elif (op := op_of_test(test, aten_ops)) is None:
            found.unmapped[key] = f"{reason}: the test name names no ATen op"
        else:
            suffix = re.search(r"_neuron_(\w+)$", test)
            add(op, reason, f"skip of {where}.{test}", path, dtypes_of(reason) or dtypes_of(suffix[1] if suffix else ""))
    return found


def toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def render_known_issues(snapshot: Snapshot, found: KnownIssues, torch_version: str) -> str:
    lines = [
        f"""# GENERATED by tools/gen_trn2_profile.py; do not edit by hand. Regenerate with
#   python tools/gen_trn2_profile.py --source <git dir of {REPOSITORY}>
# The ops TorchNeuron's own CI skips or expects to fail ({SKIP_XFAIL_FILE} and the skip_tests of
# {SPECS_DIR}*.json), with the vendor's reason and the file it comes from. A workload that runs one
# gets one warning per op and the rehearsal lists it (docs/device/fidelity.md, "Known issues").
# kind: fails (the op does not run there), slow (compiling or running it is slow enough to be
# skipped), accuracy (results differ from the CPU's). dtypes: the dtypes the vendor's reason or test
# name scopes the skip to, else those its op tests ran (float32, bfloat16: the device warns only when
# the op runs in one); absent: every dtype. overloads: the ATen overloads the op tests' samples called
# (the device warns only for those); absent: every overload.
source_repository = "{REPOSITORY}"
source_commit = "{snapshot.commit}"
torch_version = "{torch_version}"
"""]
    for op in sorted(found.issues):
        entry = found.issues[op]
        lines.append(f'[known_issues."{op}"]')
        lines += [f"{key} = {toml_string(entry[key])}" for key in ("kind", "reason", "scope", "source")]
        if entry["dtypes"]:
            lines.append(f"dtypes = {json.dumps(entry['dtypes'])}")
        if entry["overloads"]:
            lines.append(f"overloads = {json.dumps(entry['overloads'])}")
        lines.append("")
    for name in ("test_only", "unobservable", "reproduced", "unmapped"):
        entries = getattr(found, name)
        lines.append(f"[{name}]")
        lines += [f"{toml_string(key)} = {toml_string(entries[key])}" for key in sorted(entries)]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="git dir of the torch-neuronx snapshot")
    parser.add_argument("--commit", default="98154b8", help="commit to read (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--known-issues-output", type=Path, default=KNOWN_ISSUES_OUTPUT)
    args = parser.parse_args(argv)

    import torch

    snapshot = Snapshot(args.source, args.commit)
    tables = generate(snapshot, set(torch._C._dispatch_get_all_op_names()))
    args.output.write_text(render(snapshot, tables, torch.__version__.split("+")[0]))
    print(f"{args.output}: {len(tables.native)} native, {len(tables.cpu_fallback)} CPU fallback, "
          f"{len(tables.metadata)} metadata, {len(tables.not_registered)} not registered "
          f"(snapshot {snapshot.commit[:7]})")
    found = known_issues(snapshot, set(torch._C._dispatch_get_all_op_names()))
    args.known_issues_output.write_text(render_known_issues(snapshot, found, torch.__version__.split("+")[0]))
    print(f"{args.known_issues_output}: {len(found.issues)} known-issue ops, {len(found.test_only)} test-only, "
          f"{len(found.unobservable)} unobservable, {len(found.reproduced)} reproduced by the host, "
          f"{len(found.unmapped)} unmapped vendor entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
