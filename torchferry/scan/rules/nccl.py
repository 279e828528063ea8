"""TF006: the "nccl" process-group backend exists only for CUDA."""

import ast
from collections.abc import Iterator

from torchferry.report.scan import Hit, Rule, Severity
from torchferry.scan.rewrite import BACKEND, expr
from torchferry.scan.rules.cuda_literal import literals
from torchferry.scan.slots import is_backend_slot, is_compared


def check(node: ast.Constant | ast.JoinedStr, ctx) -> Iterator[Hit]:
    pieces = literals(node, "nccl", ctx)
    for piece in pieces:
        value = piece.value.value if isinstance(piece.value, ast.Constant) else None
        if not (isinstance(value, str) and value.lower() == "nccl"):
            continue
        if is_compared(node, ctx):
            yield Hit(piece, message=f'"{value}" is compared, not passed to torch as a backend: the test is false on '
                                     'every other accelerator, which takes the code\'s other path.',
                      severity=Severity.INFO)
            continue
        # "nccl" only initialises on CUDA, where the default backend for "cuda" is "nccl":
        # wherever the original worked, the rewrite passes the same string.
        safe = len(pieces) == 1 and is_backend_slot(node, ctx)
        yield Hit(piece, fix=(lambda _: expr(BACKEND)) if safe else None)


RULE = Rule(
    id="TF006",
    name="nccl-backend",
    severity=Severity.ERROR,
    summary='The "nccl" process-group backend runs on CUDA only; other accelerators register their own.',
    fix="`torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator())`, "
    "or omit `backend` to get the default for every registered device",
    safe_fix='"nccl" as the backend of `init_process_group` / `new_group` -> the default backend of the current accelerator',
    node_types=(ast.Constant, ast.JoinedStr),
    check=check,
    prefilter=r"(?i)nccl",
    tied_to_cuda=True,
    picks_device=True,
    # torch.distributed's error when a group has no backend for the tensors' device: DDP's constructor raises it for
    # a "gloo" group on an accelerator other than the CPU and CUDA, far from the line that chose "gloo"
    symptom="No backend type associated with device type",
)
