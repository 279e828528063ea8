"""The one set of mode names for every command: ``train``, ``forward``, ``generate``.

`ferry check` used to call them ``training``, ``inference`` and ``generation``; those stay
accepted as aliases on every command line, and are translated here, once.
"""

from __future__ import annotations

from enum import StrEnum

from torchferry.errors import UsageError


class Mode(StrEnum):
    TRAIN = "train"  # forward, loss, backward and an optimizer step
    FORWARD = "forward"  # inference: forward passes
    GENERATE = "generate"  # greedy generation


# How the check runs each mode: as users do (inference in eval mode under inference_mode, so that dropout is off
# and the eval-only paths, such as nn.TransformerEncoderLayer's fast path, are the ones exercised).
EXECUTION: dict[Mode, str] = {
    Mode.TRAIN: "model.train(): forward, loss, backward and an AdamW step",
    Mode.FORWARD: "model.eval() under torch.inference_mode()",
    Mode.GENERATE: "model.eval() under torch.inference_mode(), greedy",
}

ALIASES: dict[str, Mode] = {"training": Mode.TRAIN, "inference": Mode.FORWARD, "generation": Mode.GENERATE}
NAMES: tuple[str, ...] = (*(m.value for m in Mode), *ALIASES)  # every spelling a command line accepts


def parse_mode(text: str) -> Mode:
    """The mode a name or alias means; a usage error listing the valid names otherwise."""
    name = text.strip().lower()
    if name in ALIASES:
        return ALIASES[name]
    try:
        return Mode(name)
    except ValueError:
        raise UsageError(f"unknown mode {text!r}; valid: {', '.join(m.value for m in Mode)} "
                         f"(aliases: {', '.join(f'{a}={m.value}' for a, m in ALIASES.items())}).") from None
