"""The rule table: one module per rule, listed here in id order.

A rule module defines `check(node, ctx)` (yielding `Hit`s) and `RULE`; adding a rule is
one new module and one line below.
"""

from torchferry.report.scan import Rule
from torchferry.scan.rules import (
    amp_autocast,
    bf16_grad_scaler,
    compile_dynamic,
    compile_mode,
    compile_shape_churn,
    cuda_extension,
    cuda_graph_mode,
    cuda_literal,
    cuda_method,
    cuda_only_imports,
    cudnn_backends,
    data_dependent_shape,
    device_api,
    events_streams,
    fused_rnn,
    grad_scaler,
    host_sync,
    is_cuda,
    memory_api,
    nccl,
    other_cuda_api,
    pin_memory_device,
    predicted_fallback,
    state_dict_save,
    torch_load,
    torchscript,
    triton_kernels,
    whole_module_save,
)

RULES: tuple[Rule, ...] = (
    cuda_method.RULE,
    cuda_literal.RULE,
    device_api.RULE,
    amp_autocast.RULE,
    grad_scaler.RULE,
    nccl.RULE,
    compile_mode.RULE,
    compile_dynamic.RULE,
    cuda_only_imports.RULE,
    triton_kernels.RULE,
    cuda_extension.RULE,
    cudnn_backends.RULE,
    memory_api.RULE,
    is_cuda.RULE,
    pin_memory_device.RULE,
    events_streams.RULE,
    torch_load.RULE,
    other_cuda_api.RULE,
    whole_module_save.RULE,
    data_dependent_shape.RULE,
    host_sync.RULE,
    compile_shape_churn.RULE,
    torchscript.RULE,
    bf16_grad_scaler.RULE,
    cuda_graph_mode.RULE,
    fused_rnn.RULE,
    state_dict_save.RULE,
    predicted_fallback.RULE,
)
RULES_BY_ID = {rule.id: rule for rule in RULES}
