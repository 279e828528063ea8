"""TF024: a GradScaler in a script that trains in bfloat16, where no scaler is needed.

Loss scaling exists because float16 gradients underflow; bfloat16 has float32's exponent
range, so its gradients do not, and bf16 is TorchNeuron's recommended autocast dtype. A
scaler still checks every gradient for inf/NaN and reads the result on the host in each
`scaler.step` (`found_inf.item()` in torch/amp/grad_scaler.py), a device sync per step.
Reported when the source names bfloat16 (`torch.bfloat16`, `"bf16"`, `bf16=True`) and never
float16; a scaler with `enabled=` given is left to its author.
"""

from collections.abc import Iterator

import libcst as cst

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import keyword

SCALERS = {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler",
           "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"}
BF16 = {"torch.bfloat16"}
FP16 = {"torch.float16", "torch.half"}
# strings that name a precision (Accelerate's mixed_precision=, Lightning's precision=, ...)
BF16_WORDS = {"bf16", "bfloat16", "bf16-mixed", "bf16-true"}
FP16_WORDS = {"fp16", "float16", "half", "16-mixed", "16-true"}


def _dtypes(ctx) -> set[str]:
    """The half-precision dtypes this source names: 'bf16', 'fp16'."""
    found: set[str] = set()

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Name, cst.Attribute)) and ctx.is_outermost(node):
                name = ctx.qualname(node) or ""
                if name in BF16:
                    found.add("bf16")
                elif name in FP16:
                    found.add("fp16")
            elif isinstance(node, cst.SimpleString):
                word = str(node.evaluated_value).lower()
                found.update({"bf16"} if word in BF16_WORDS else {"fp16"} if word in FP16_WORDS else set())
            elif isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value in ("bf16", "fp16") \
                    and isinstance(node.value, cst.Name) and node.value.value == "True":
                found.add(node.keyword.value)  # TrainingArguments(bf16=True)
            return True

    ctx.module.visit(_Find())
    return found


def check(node: cst.Call, ctx) -> Iterator[Hit]:
    if ctx.qualname(node.func) not in SCALERS or keyword(node, "enabled") is not None:
        return
    if _dtypes(ctx) != {"bf16"}:
        return
    yield Hit(node.func, message=(
        "a GradScaler in a bfloat16 script: bf16 gradients do not underflow, so it scales for nothing, and each "
        "`scaler.step` reads its inf check on the host, a device sync per step (torch/amp/grad_scaler.py "
        "`_maybe_opt_step`; bf16 is TorchNeuron's recommended autocast dtype: pytorch-native-overview FAQ)."))


RULE = Rule(
    id="TF024",
    name="bf16-grad-scaler",
    severity=Severity.WARNING,
    summary="A GradScaler is used in a bfloat16 script, where no scaler is needed; it costs a device sync per step.",
    fix="drop the scaler (`loss.backward(); optimizer.step()`), or `GradScaler(..., enabled=False)` for bf16",
    node_types=(cst.Call,),
    check=check,
    prefilter=r"GradScaler",
)
