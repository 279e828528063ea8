"""TF024: a GradScaler in a script that trains in bfloat16, where no scaler is needed.

Loss scaling exists because float16 gradients underflow; bfloat16 has float32's exponent
range, so its gradients do not, and bf16 is TorchNeuron's recommended autocast dtype. A
scaler still checks every gradient for inf/NaN and reads the result on the host in each
`scaler.step` (`found_inf.item()` in torch/amp/grad_scaler.py), a device sync per step.
Reported when the source names bfloat16 (`torch.bfloat16`, `"bf16"`, `bf16=True`) and never
float16; a scaler with `enabled=` given is left to its author.
"""

import ast
from collections.abc import Iterator

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.syntax import keyword

SCALERS = {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler",
           "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"}
BF16 = {"torch.bfloat16"}
FP16 = {"torch.float16", "torch.half"}
# strings that name a precision (Accelerate's mixed_precision=, Lightning's precision=, ...)
BF16_WORDS = {"bf16", "bfloat16", "bf16-mixed", "bf16-true"}
FP16_WORDS = {"fp16", "float16", "half", "16-mixed", "16-true"}


def _named(node: ast.AST, ctx) -> set[str]:  # noqa: ANN001 - engine.AstContext
    """The half-precision dtypes `node` names: 'bf16', 'fp16'."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = (ctx.qualname(node) or "") if ctx.is_outermost(node) else ""
        return {"bf16"} if name in BF16 else {"fp16"} if name in FP16 else set()
    if isinstance(node, ast.keyword):  # TrainingArguments(bf16=True)
        return ({node.arg} if node.arg in ("bf16", "fp16") and isinstance(node.value, ast.Constant)
                and node.value.value is True else set())
    if not (isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))):
        return set()
    found = set()
    for piece in ctx.tree.written_strings(node):  # each literal as written, as libcst's `SimpleString`s
        if isinstance(piece.value, ast.Constant):
            word = str(piece.value.value).lower()
            found |= {"bf16"} if word in BF16_WORDS else {"fp16"} if word in FP16_WORDS else set()
    return found


def _dtypes(ctx) -> set[str]:  # noqa: ANN001 - engine.AstContext
    """The half-precision dtypes this source names (found once per source)."""
    key = ("TF024 dtypes",)
    if key not in ctx.memo:
        ctx.memo[key] = set().union(*(_named(n, ctx) for n in ctx.tree.nodes()))
    return ctx.memo[key]


def check(node: ast.Call, ctx) -> Iterator[Hit]:
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
    node_types=(ast.Call,),
    check=check,
    prefilter=r"GradScaler",
)
