"""`ferry check`: prove parity, full time, effective cost and reversible exit; give a verdict.

    ferry check                      # tiny Llama training, cpu -> default target, ./ferry-report/
    ferry check -w gpt2 --mode generate --target cuda
    ferry check -w path/to/my_model.py:build --precision bf16-mixed
    ferry check -- python train.py ARGS   # the user's own, unchanged training script (check/script/)

The options come from the one table (torchferry.harness.options); the configuration is built and
validated once (check/config.py); the source's pipeline runs inside the one report lifecycle
(check/lifecycle.py). Light at import: torch is imported inside ``run``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torchferry.env import Environment
from torchferry.harness import options
from torchferry.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_arguments(parser, "check")
    parser.add_argument("script_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="check your own, unchanged training script: `-- python train.py ARGS`, `-- python -m pkg "
                             "ARGS`, `-- torchrun ... train.py ARGS` or `-- accelerate launch ... train.py ARGS`; "
                             "`{device}` in the command becomes each side's device (docs/check/scripts.md)")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.check import lifecycle
    from torchferry.check.config import CheckConfig

    cfg = CheckConfig.build(args, Path.cwd())  # every usage, device and output error is raised here, before anything runs
    if cfg.script is not None:
        from torchferry.check.script.runner import ScriptPipeline as Pipeline
    else:
        from torchferry.check.runner import Runner as Pipeline
    quiet = bool(getattr(args, "quiet", False))
    return lifecycle.run(cfg, env, list(getattr(args, "_argv", ())), quiet, Pipeline)
