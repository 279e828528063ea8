"""The likeliest slips in naming a model are refused before anything runs, each with its fix: a Python file where a
model or a workload goes, a Hub id behind a prefix no command reads, a module form whose function is no name.

Each case is checked as a user meets it: the exit status and the message's first line."""

import pytest
from ferryrun import ferry

from torchferry.status import ExitStatus


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def first_line(argv: list[str], out) -> tuple[int, str]:
    code, _, stderr = ferry(*argv, "-o", str(out / "out"))
    assert "Traceback" not in stderr and not (out / "out" / "work").exists()
    return code, stderr.splitlines()[0]


@pytest.mark.parametrize("spec", ["train.py", "missing.py"])
@pytest.mark.parametrize("command", ["check", "plan"])  # plan's -w takes what check's -w takes
def test_a_python_file_given_as_the_workload_names_both_ways_to_check_it(here, spec, command):
    code, line = first_line([command, "-w", spec], here)
    assert code == ExitStatus.USAGE
    assert line.startswith(f"ferry {command}: '{spec}' is a Python file, not a model:")
    assert f"'{spec}:build'" in line and f"`ferry check -- python {spec}`" in line


@pytest.mark.parametrize("spec", ["hf:acme/tiny", "hf://acme/tiny", "HF:acme/tiny", "https://huggingface.co/acme/tiny",
                                  "huggingface.co/acme/tiny/tree/main"])
@pytest.mark.parametrize("command", [["check", "-w"], ["plan", "-w"], ["coverage"]])
def test_a_hub_id_behind_a_prefix_is_refused_up_front_saying_to_drop_it(here, command, spec):
    code, line = first_line([*command, spec], here)
    prefix = spec[: spec.index("acme/")]
    assert code == ExitStatus.USAGE
    assert line == (f"ferry {command[0]}: model '{spec}': drop the '{prefix}' prefix: a Hub id is named as org/name "
                    "(here 'acme/tiny'), optionally @revision; its config.json is read from your Hugging Face cache, "
                    "or fetched.")


def test_a_module_form_whose_function_is_no_name_is_refused(here):
    code, line = first_line(["check", "-w", "pkg.mod:acme/tiny"], here)
    assert code == ExitStatus.USAGE
    assert line.startswith("ferry check: workload 'pkg.mod:acme/tiny': 'acme/tiny' after the ':' is not the name of a "
                           "function.")


def test_a_python_file_given_as_an_architecture_points_at_plugin(here):
    code, line = first_line(["coverage", "train.py"], here)
    assert code == ExitStatus.USAGE
    assert line.startswith("ferry coverage: 'train.py' is a Python file, not a model: ")
    assert "a custom architecture's file is given with --plugin train.py" in line


def test_a_build_function_in_a_file_is_still_a_workload(here):
    from torchferry.workloads.protocol import resolve_source

    source = resolve_source("train.py:build", here)
    assert (source["kind"], source["attr"]) == ("file", "build")
