"""One vocabulary of flags: an option that two subcommands share is spelt the same, short form included."""

from __future__ import annotations

import argparse

from torchferry.cli import build_parser


def _options_by_command() -> dict[str, dict[str, tuple[str, ...]]]:
    """dest -> {subcommand: its option strings}."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if action.option_strings:
                found.setdefault(action.dest, {})[name] = tuple(sorted(action.option_strings))
    return found


def test_a_shared_option_has_the_same_spellings_in_every_subcommand():
    differing = {dest: spellings for dest, spellings in _options_by_command().items()
                 if len(set(spellings.values())) > 1}
    assert differing == {}


def test_the_workload_is_w_wherever_a_workload_is_taken():
    workload = _options_by_command()["workload"]
    assert set(workload) >= {"check", "plan"} and all("-w" in spellings for spellings in workload.values())
    assert build_parser().parse_args(["plan", "-w", "model.py:build"]).workload == "model.py:build"
