"""The build of the device's C++ core (setup.py): one build by default, the profile-guided one only when asked,
no debug information, and progress a user sees while pip hides the build's output."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import setuptools

SETUP = Path(__file__).parents[1] / "setup.py"


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py as a module, with setuptools.setup recording its arguments instead of building."""
    given = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: given.update(kwargs))
    spec = importlib.util.spec_from_file_location("torchferry_setup", SETUP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.given = given
    return module


@pytest.mark.parametrize("value, why", [
    (None, "TORCHFERRY_PGO=1 asks for it: two builds for ~1.5% faster small-op steps"),
    ("0", "TORCHFERRY_PGO=1 asks for it: two builds for ~1.5% faster small-op steps"),
    ("yes", "TORCHFERRY_PGO='yes' is neither 0 nor 1"),
])
def test_the_default_build_is_one_build_and_the_profile_guided_one_is_asked_for(setup_py, monkeypatch, value, why):
    if value is None:
        monkeypatch.delenv("TORCHFERRY_PGO", raising=False)
    else:
        monkeypatch.setenv("TORCHFERRY_PGO", value)
    assert setup_py.Build._why_not_profile_guided(None) == why


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine: the profile-guided build is GCC's")
def test_asked_for_with_gcc_it_is_profile_guided(setup_py, monkeypatch):
    monkeypatch.setenv("TORCHFERRY_PGO", "1")
    monkeypatch.setenv("CXX", "g++")
    assert setup_py.Build._why_not_profile_guided(None) is None  # this machine's compiler is GCC


def test_the_core_is_built_without_debug_information(setup_py):
    (ext,) = setup_py.given["ext_modules"]
    args = ext.extra_compile_args
    assert "-g0" in args and args.index("-O2") < args.index("-g0")  # after Python's own -g, so it wins


def test_progress_goes_to_stderr_without_a_terminal_and_names_the_step(setup_py, monkeypatch, capsys):
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError("no tty")))
    progress = setup_py.Progress()
    assert progress.stream is sys.stderr
    progress.say("compiling: compiled Allocator.cpp (1 of 10)")
    assert capsys.readouterr().err.startswith("torchferry build (0 s): compiling: compiled Allocator.cpp (1 of 10)")


def test_each_file_is_said_as_it_is_compiled(setup_py, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError("no tty")))
    progress = setup_py.Progress()
    objects = [str(tmp_path / "Allocator.o"), str(tmp_path / "Guard.o")]
    finish = progress.compiling("pass 1 of 2 (instrumented)", objects)
    Path(objects[1]).write_text("")
    finish()  # the compiler is done: what it finished last is said too
    said = [line.split("): ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert said == ["pass 1 of 2 (instrumented): compiled Guard.cpp (1 of 2)"]
