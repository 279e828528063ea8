"""One vocabulary of flags (torchferry.harness.options): a flag means the same in every subcommand, and `ferry check`
refuses, by name and with the reason, a flag the chosen source would not read."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from ferryrun import ferry

from torchferry.cli import build_parser
from torchferry.harness import options
from torchferry.harness.options import BUILT, OPTIONS, SCRIPT

ROOT = Path(__file__).resolve().parents[2]


def _actions_by_command() -> dict[str, dict[str, argparse.Action]]:
    """subcommand -> dest -> its argparse action."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: {a.dest: a for a in sub._actions if a.option_strings} for name, sub in commands.choices.items()}


def _meaning(action: argparse.Action) -> str:
    return re.sub(r" \(default: [^)]*\)$", "", action.help or "")  # each command states its own default


def test_every_flag_two_subcommands_share_is_one_option_of_the_table_with_one_meaning():
    by_command = _actions_by_command()
    shared: dict[str, dict[str, argparse.Action]] = {}
    for command, actions in by_command.items():
        for dest, action in actions.items():
            shared.setdefault(dest, {})[command] = action
    for dest, actions in shared.items():
        if len(actions) < 2 or dest in ("help", "jobs"):  # --help is argparse's; -j/--jobs: see the next test
            continue
        assert dest in options.BY_DEST, f"--{dest} is shared by {sorted(actions)} but is not in the options table"
        assert len({tuple(sorted(a.option_strings)) for a in actions.values()}) == 1, dest
        assert len({_meaning(a) for a in actions.values()}) == 1, f"--{dest} means different things: {actions}"


def test_jobs_means_work_in_parallel_wherever_it_is_taken():
    by_command = _actions_by_command()
    for command in ("coverage", "scan"):
        action = by_command[command]["jobs"]
        assert action.option_strings == ["-j", "--jobs"] and "parallel" in action.help


@pytest.mark.parametrize("flag, meaning, commands", [
    ("--profile", "the device profile", {"plan"}),  # a device profile, never a profiler switch
    ("--trace", "torch.profiler Chrome trace", {"check"}),
    ("--precision", "bf16-mixed", {"check", "plan"}),  # not --dtype in one command and --precision in another
    ("--batch-size", "the global batch of one step", {"check", "plan"}),  # not --batch in plan
    ("--ref-instance", "price-table instance of the reference", {"check", "plan"}),  # not --reference in plan
    ("--target-instance", "price-table instance of the target", {"check", "plan"}),  # not --instance in plan
    ("--timeout", "seconds one phase may take", {"check", "coverage"}),
    ("--seed", "the seed of weights, batches and random draws", {"check", "coverage"}),
])
def test_a_flags_meaning_is_frozen(flag, meaning, commands):
    by_command = _actions_by_command()
    taking = {c for c, actions in by_command.items() if any(flag in a.option_strings for a in actions.values())}
    assert taking == commands
    for command in commands:
        (action,) = [a for a in by_command[command].values() if flag in a.option_strings]
        assert meaning in action.help, (command, action.help)


@pytest.mark.parametrize("retired", ["--dtype", "--batch", "--reference", "--instance"])
def test_the_retired_spellings_are_no_flag_of_any_subcommand(retired):
    assert not any(retired in a.option_strings for actions in _actions_by_command().values() for a in actions.values())


def test_the_workload_is_w_wherever_a_workload_is_taken():
    by_command = _actions_by_command()
    assert all(by_command[c]["workload"].option_strings == ["-w", "--workload"] for c in ("check", "plan"))
    assert build_parser().parse_args(["plan", "-w", "model.py:build"]).workload == "model.py:build"


# -- `ferry check`: an option the source does not read is refused --------------------------------------------------
BUILT_ONLY = [o for o in OPTIONS if "check" in o.commands and SCRIPT not in o.commands["check"]]
VALUES = {"flag": None, "int": "2", "float": "2", "str": "x"}


@pytest.mark.parametrize("option", BUILT_ONLY, ids=lambda o: o.name)
def test_an_option_a_script_would_not_read_is_refused_by_name_with_the_reason(option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    given = [option.name] + ([VALUES[option.kind]] if VALUES[option.kind] is not None else [])
    code, out, err = ferry("check", "--target", "cpu", *given, "--", "python", "train.py")
    assert code == 2, err
    assert f"{option.name} does not apply to a script" in err and option.refusal.split(":")[0] in err
    assert not (tmp_path / "ferry-report").exists()  # refused before anything ran


def test_compile_with_a_script_names_the_flag_and_says_why():
    code, _, err = ferry("check", "--compile", "neuron", "--", "python", str(ROOT / "examples" / "train_loop.py"))
    assert code == 2
    assert err.startswith("ferry check: --compile does not apply to a script")
    assert "the script's own code decides whether it compiles" in err


def test_several_unused_options_are_named_together(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    code, _, err = ferry("check", "--target", "cpu", "--nproc", "2", "--rounds", "5", "--", "python", "train.py")
    assert code == 2 and "--nproc, --rounds do not apply to a script" in err and "torchrun" in err


def test_weights_with_a_build_workload_is_refused_as_not_read():
    code, _, err = ferry("check", "--target", "cpu", "-w", "mlp", "--trust-remote-code")
    assert code == 2 and "--trust-remote-code does not apply to a build() workload" in err


@pytest.mark.parametrize("source", [[], ["--", "python", "train.py"]], ids=["workload", "script"])
@pytest.mark.parametrize("flag, value", [("--timeout", "nan"), ("--tol", "nan"), ("--volume", "nan"),
                                         ("--eng-rate", "-5"), ("--seed", "-1"), ("--steps", "0")])
def test_a_bad_number_is_refused_on_both_sources(source, flag, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    code, _, err = ferry("check", "--target", "cpu", flag, value, *source)
    assert code == 2, err
    assert err.startswith(f"ferry check: {flag} must be") and f"(got {value})" in err
    assert not (tmp_path / "ferry-report").exists()


def test_every_numeric_option_of_the_table_has_a_range():
    assert [o.name for o in OPTIONS if o.kind in ("int", "float") and o.bound is None] == []


def test_the_table_in_the_docs_is_the_tables_own():
    from torchferry.harness.options import markdown_table

    doc = (ROOT / "docs" / "check" / "cli.md").read_text()
    assert markdown_table() in doc, "docs/check/cli.md's options table is stale: python tools/gen_options_doc.py"


def test_the_sources_a_built_option_applies_to_are_the_built_ones():
    assert all(set(o.commands["check"]) <= set(BUILT) for o in BUILT_ONLY)
