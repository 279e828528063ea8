"""Built-in workloads and the user-workload protocol loader."""

from __future__ import annotations

import sys

import pytest
import torch

from torchferry.errors import MissingDependencyError, UsageError, WorkloadError
from torchferry.workloads import BUILTIN
from torchferry.workloads.protocol import load_workload, resolve_source

FIXTURES = __import__("pathlib").Path(__file__).parents[1] / "check" / "fixtures"


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_trains_one_step_with_the_same_batch_for_the_same_seed(name):
    torch.manual_seed(0)
    wl = load_workload(name, {"size": "tiny", "mode": "training"})
    a, b = wl.batch("cpu", 3), wl.batch("cpu", 3)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], wl.batch("cpu", 4)[k]) for k in a)
    loss = wl.loss_of(wl.forward(wl.model, a), a)
    loss.backward()
    assert torch.isfinite(loss) and any(p.grad is not None for p in wl.model.parameters())


@pytest.mark.parametrize(("name", "generates"), [("llama", True), ("gpt2", True), ("bert", False), ("mlp", False)])
def test_generation_support_is_declared(name, generates):
    assert load_workload(name, {"mode": "generation"}).generates is generates


def test_options_are_passed_only_when_build_accepts_them():
    wl = load_workload("llama", {"size": "tiny", "batch_size": 3, "seq_len": 5, "mode": "inference", "dtype": "float32"})
    batch = wl.batch("cpu", 0)
    assert batch["input_ids"].shape == (3, 5) and "labels" not in batch


def test_user_file_spec_and_tuple_return_are_normalised():
    wl = load_workload(f"{FIXTURES / 'failing.py'}:oom", {})
    assert wl.source["kind"] == "file" and wl.loss is not None and wl.generates is False


def test_module_spec_resolves_without_importing(tmp_path):
    assert resolve_source("torchferry.workloads.mlp:build", cwd=tmp_path) == {
        "kind": "module", "module": "torchferry.workloads.mlp", "attr": "build", "paths": [str(tmp_path.resolve())]}


@pytest.mark.parametrize("spec", ["nope", "missing.py:build", ":build", "x.py:"])
def test_bad_specs_are_usage_errors(spec):
    with pytest.raises(UsageError):
        resolve_source(spec)


def test_missing_dependency_and_raising_build_are_told_apart():
    with pytest.raises(MissingDependencyError, match="ferry_no_such_package.*pip install"):
        load_workload(f"{FIXTURES / 'failing.py'}:missing_dependency", {})
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{FIXTURES / 'failing.py'}:build_raises", {})
    assert "build itself is broken" in info.value.user_traceback


def test_missing_build_attribute_is_a_usage_error():
    with pytest.raises(UsageError, match="no callable 'nothing'"):
        load_workload(f"{FIXTURES / 'failing.py'}:nothing", {})


def test_mlp_imports_only_torch_so_exit_can_rebuild_it_without_torchferry():
    import ast
    from pathlib import Path

    import torchferry.workloads.mlp as mlp

    tree = ast.parse(Path(mlp.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"torch", "__future__"}


def test_a_relative_file_spec_is_resolved_against_the_given_folder(tmp_path):
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "x.py").write_text("def build():\n    pass\n")
    source = resolve_source("wl/x.py:build", cwd=tmp_path)
    assert source == {"kind": "file", "path": str(tmp_path / "wl" / "x.py"), "attr": "build",
                      "paths": [str(tmp_path / "wl"), str(tmp_path)]}
    with pytest.raises(UsageError, match="does not exist"):
        resolve_source("wl/x.py:build", cwd=tmp_path / "elsewhere")


def test_build_receives_the_protocols_mode_names_from_the_harness_modes(tmp_path):
    from torchferry.harness.modes import Mode

    (tmp_path / "m.py").write_text(
        "import torch\n\n"
        "def build(mode):\n"
        "    assert mode == 'training', mode\n"
        "    return torch.nn.Linear(2, 2), lambda device, seed: torch.zeros(1, 2, device=device)\n")
    assert load_workload(f"{tmp_path / 'm.py'}:build", {"mode": Mode.TRAIN}).model is not None


@pytest.fixture
def own_import_path(monkeypatch):
    """Loading a workload puts its folders on sys.path and imports its modules: undone after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))


def test_an_adapter_imports_the_module_beside_it_from_any_working_folder(tmp_path, monkeypatch, own_import_path):
    monkeypatch.chdir(tmp_path)
    wl = load_workload(f"{FIXTURES / 'neighbour' / 'adapter.py'}:build", {})
    assert type(wl.model).__name__ == "Net" and type(wl.model).__module__ == "net"


def test_a_module_spec_imports_from_the_callers_folder(tmp_path, own_import_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "wl.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(1, 1), "
                                              "lambda device, seed: torch.ones(1, 1, device=device)\n")
    wl = load_workload("mypkg.wl:build", {}, resolve_source("mypkg.wl:build", cwd=tmp_path))
    assert isinstance(wl.model, torch.nn.Linear)


def test_install_advice_only_for_a_module_that_is_not_beside_the_adapter(tmp_path, own_import_path):
    (tmp_path / "adapter.py").write_text("from helpers import Net\n\ndef build():\n    pass\n")
    (tmp_path / "helpers.py").write_text("import ferry_absent_package\nNet = None\n")
    with pytest.raises(MissingDependencyError, match="'ferry_absent_package'.*pip install ferry_absent_package"):
        load_workload(f"{tmp_path / 'adapter.py'}:build", {})
    (tmp_path / "plain.py").write_text("X = 1\n")  # a module beside the adapter, not a package
    (tmp_path / "sub.py").write_text("def build():\n    import plain.inner\n")
    with pytest.raises(UsageError) as info:
        load_workload(f"{tmp_path / 'sub.py'}:build", {})
    assert "beside it" in str(info.value) and "pip install" not in str(info.value)
