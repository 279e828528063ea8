"""TF003: `torch.cuda` device calls that `torch.accelerator` provides for every device."""

from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import expr

# torch.cuda name -> torch.accelerator name; same arguments, same result on a CUDA machine.
RENAMES = {
    "torch.cuda.synchronize": "synchronize",
    "torch.cuda.device_count": "device_count",
    "torch.cuda.current_device": "current_device_index",
    "torch.cuda.set_device": "set_device_index",
    "torch.cuda.is_available": "is_available",
}


def check(node: cst.BaseExpression, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node) if ctx.is_outermost(node) else None
    if name in RENAMES:
        new = f"torch.accelerator.{RENAMES[name]}"
        yield Hit(node, message=f"`{name}` works only on CUDA; `{new}` works on every accelerator.",
                  fix=lambda _: expr(new))


RULE = Rule(
    id="TF003",
    name="cuda-device-api",
    severity=Severity.WARNING,
    summary="A `torch.cuda` device call has a `torch.accelerator` equivalent that works on every device.",
    fix="`torch.accelerator.synchronize / device_count / current_device_index / set_device_index / is_available`",
    safe_fix="renamed to the `torch.accelerator` function (same arguments)",
    node_types=(cst.Name, cst.Attribute),
    check=check,
    prefilter=r"cuda",
)
