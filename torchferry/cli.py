"""The `ferry` command: `main(argv, env) -> exit code`.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args, env) -> ExitStatus``; this file only parses, dispatches and turns
errors into one-paragraph messages (``ferry COMMAND: ...``) and documented exit codes
(torchferry.status). Everything it prints, argparse's usage errors and help included,
goes through the injected ``Environment``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from torchferry import __version__
from torchferry.env import Environment
from torchferry.device._settings import check_environment
from torchferry.errors import FerryError, WorkloadError, message
from torchferry.harness.signals import stop_on_signals, stopped_by
from torchferry.status import ExitStatus

# name -> (module, one-line help). Modules are imported only to build their parser;
# they must stay light at import (torch and friends are imported inside `run`).
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("torchferry.check.command", "prove parity, full time, effective cost and reversible exit; give a verdict"),
    "scan": ("torchferry.scan.command", "find the code that ties a project to CUDA, and fix what is safe to fix"),
    "coverage": ("torchferry.coverage.command", "measure what share of model architectures run on a device, suite by suite"),
    "plan": ("torchferry.plan.command", "predict per-core memory, step-time and cost bounds of a full-size training layout"),
}


def _parser_class(env: Environment) -> type[argparse.ArgumentParser]:
    """An ArgumentParser whose help, usage and errors are written to ``env``'s streams."""

    class Parser(argparse.ArgumentParser):
        def _print_message(self, text: str, file=None) -> None:  # noqa: ANN001 - argparse's signature
            if text:
                (env.stderr if file is sys.stderr else env.stdout).write(text)

    return Parser


def build_parser(env: Environment | None = None) -> argparse.ArgumentParser:
    parser = _parser_class(env or Environment())(
        prog="ferry",
        description="Prove a PyTorch migration: parity, full time, effective cost, reversible exit.",
    )
    parser.add_argument("--version", action="version", version=f"torchferry {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show torchferry's own traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    env = env or Environment()
    parser = build_parser(env)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 0 for --help/--version, 2 for bad usage
        return int(exc.code or 0)
    args._argv = list(argv) if argv is not None else sys.argv[1:]  # for the reports' meta.command
    if args.command is None:
        parser.print_help()
        return int(ExitStatus.USAGE)
    try:
        with stop_on_signals():  # SIGTERM and SIGHUP stop a command as Ctrl-C does: what was measured is reported
            check_environment(os.environ)  # a bad device variable: one line now, not a traceback from a worker later
            return int(args._module.run(args, env))
    except KeyboardInterrupt as exc:
        env.err(f"ferry {args.command}: interrupted by {stopped_by(exc)}")
        return int(ExitStatus.INTERRUPTED)
    except WorkloadError as exc:
        if exc.user_traceback:
            env.err(exc.user_traceback.rstrip())
        env.err(message(args.command, exc))
        return int(exc.exit_status)
    except FerryError as exc:
        if args.traceback:
            env.err(traceback.format_exc().rstrip())
        env.err(message(args.command, exc))
        return int(exc.exit_status)
    except Exception:  # a bug in torchferry: say so, with the traceback
        env.err(traceback.format_exc().rstrip())
        env.err(f"ferry {args.command}: internal error (a bug in torchferry); please report it with the traceback above.")
        return int(ExitStatus.INTERNAL_ERROR)
