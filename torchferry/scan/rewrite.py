"""The device-neutral expressions every safe fix writes, and small libcst helpers rules share.

Each expression evaluates, on the CUDA machine the code was written for, to exactly what
the replaced CUDA spelling did; elsewhere it follows `torch.accelerator` (and falls back
to the CPU where no accelerator exists, so a fixed script still runs there).
"""

from __future__ import annotations

import libcst as cst

# The current accelerator as a torch.device (None without one: `.to(None)` is a no-op).
ACCELERATOR = "torch.accelerator.current_accelerator()"
# The current accelerator's type as a str: "cuda" on a CUDA machine, "neuron", ..., else "cpu".
DEVICE_TYPE = 'getattr(torch.accelerator.current_accelerator(), "type", "cpu")'
# The default process-group backend of that device type: "nccl" on CUDA, "gloo" on the CPU.
BACKEND = f"torch.distributed.get_default_backend_for_device({DEVICE_TYPE})"


def expr(code: str) -> cst.BaseExpression:
    """Parse one of the expressions above (or any other) into a node."""
    return cst.parse_expression(code)


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The `name=` argument of `call`, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    """The plain positional arguments of `call` (no `*args`, no keywords)."""
    return [a for a in call.args if a.keyword is None and not a.star]


def positional_to_keywords(call: cst.Call, names: tuple[str, ...]) -> list[cst.Arg] | None:
    """`call.args` with positionals turned into keywords `names[i]=`; None if that is impossible (`*args`)."""
    if any(a.star for a in call.args):
        return None
    args, index = [], 0
    for arg in call.args:
        if arg.keyword is None:
            if index >= len(names):
                return None
            arg = arg.with_changes(
                keyword=cst.Name(names[index]),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            )
            index += 1
        args.append(arg)
    return args


def with_trailing_comma(args: list[cst.Arg]) -> list[cst.Arg]:
    """Make every argument but the last end with `, ` so new arguments can be prepended."""
    out = []
    for i, arg in enumerate(args):
        if i < len(args) - 1 and arg.comma is cst.MaybeSentinel.DEFAULT:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        out.append(arg)
    return out


def first_arg(value: cst.BaseExpression, keyword_name: str | None = None) -> cst.Arg:
    """A new argument `value` (or `keyword_name=value`) followed by `, `."""
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if keyword_name is None:
        return cst.Arg(value=value, comma=comma)
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    return cst.Arg(value=value, keyword=cst.Name(keyword_name), equal=equal, comma=comma)


def prepend(new: cst.Arg, rest: list[cst.Arg]) -> list[cst.Arg]:
    """`new` followed by `rest`; `new` loses its comma when `rest` is empty."""
    if not rest:
        return [new.with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    return [new, *with_trailing_comma(rest)]
