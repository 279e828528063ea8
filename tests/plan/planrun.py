"""In-process `ferry plan` runs for the plan tests, and the small configs they plan.

A module of its own (not conftest) so that test files import it by a unique name."""

from __future__ import annotations

import json
from pathlib import Path

from ferryrun import FerryRun, ferry_report

# A Llama small enough to step in a second on the built-in device, with a vocabulary large
# enough that the loss's logits matter, as they do at full size.
SMALL_LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
               "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 2048, "tie_word_embeddings": False}


def run_plan(args: list[str], output: Path) -> FerryRun:
    """`ferry plan ARGS -o OUTPUT -q` in-process, with captured streams and the JSON report if written."""
    return ferry_report("plan", *args, "-q", output=output, report="plan.json")


def write_config(folder: Path, **overrides) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps({**SMALL_LLAMA, **overrides}))
    return path
