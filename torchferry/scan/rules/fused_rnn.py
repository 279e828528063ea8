"""TF026: `nn.LSTM` / `nn.GRU` (and their cells) on the target.

ATen's LSTM and GRU cells (aten/src/ATen/native/RNN.cpp) call the fused cell kernels
`_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` for every CUDA, XPU or PrivateUse1 input, and
only CUDA implements them. TorchNeuron registers neither, and its CPU fallback finds no CPU
kernel, so the module fails on its first forward: TorchNeuron's own runs of PyTorch's suite list
it (tests/pytorch_tests/specs/ddp_spec.json, test_ddp_packed_sequence: "Could not run
'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU' backend"; failing_test_methods/
TestNNDeviceType.json). The built-in device fails the same way (csrc/CpuGaps.cpp). `nn.RNN`
(tanh/ReLU) has no fused cell and runs.
"""

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import refers_to
from torchferry.report.scan import Hit, Rule, Severity

# qualified name -> the fused cell kernel it reaches on an accelerator
NAMES = {
    "torch.nn.LSTM": "_thnn_fused_lstm_cell", "torch.nn.LSTMCell": "_thnn_fused_lstm_cell",
    "torch.lstm": "_thnn_fused_lstm_cell", "torch.lstm_cell": "_thnn_fused_lstm_cell",
    "torch.nn.GRU": "_thnn_fused_gru_cell", "torch.nn.GRUCell": "_thnn_fused_gru_cell",
    "torch.gru": "_thnn_fused_gru_cell", "torch.gru_cell": "_thnn_fused_gru_cell",
}


def check(node: ast.Call, ctx) -> Iterator[Hit]:
    name = ctx.qualname(node.func)
    kernel = NAMES.get(name)
    if kernel is None:
        return
    yield Hit(node, message=(
        f"`{name}` runs ATen's fused cell `aten::{kernel}` on an accelerator; TorchNeuron has no kernel for it "
        "and its CPU fallback fails ('Could not run ... with arguments from the CPU backend')."))


RULE = Rule(
    id="TF026",
    name="fused-rnn-cell",
    severity=Severity.ERROR,
    summary="`nn.LSTM` / `nn.GRU` (and their cells) call a CUDA-only fused cell kernel on an accelerator; "
    "TorchNeuron has none, so the first forward fails.",
    fix="write the cell with `nn.Linear` and `torch.sigmoid`/`torch.tanh` (it compiles for the device), or keep "
    "the recurrent module on the CPU",
    node_types=(ast.Call,),
    check=check,
    prefilter=r"LSTM|GRU|lstm|gru",
    gate=refers_to(*NAMES),
)
