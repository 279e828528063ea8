"""nn.GRU/nn.LSTM fail on `neuron` as they do on TorchNeuron, with the way out.

ATen's GRU and LSTM cells call the CUDA-only fused cell ops for PrivateUse1 inputs;
TorchNeuron has no kernel for them and its CPU fallback fails (its own test lists say so:
ddp_spec.json test_ddp_packed_sequence). The rehearsal predicts that failure, counted as
a host fallback (torchferry/device/csrc/CpuGaps.cpp refuse_fused_rnn_cell).
"""

from __future__ import annotations

import pytest
import torch


@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("ignore:.*runs on the host CPU")
@pytest.mark.parametrize(("make", "fused"), [
    (lambda: torch.nn.GRUCell(4, 3), "aten::_thnn_fused_gru_cell"),
    (lambda: torch.nn.LSTM(4, 3), "aten::_thnn_fused_lstm_cell"),
], ids=["GRUCell", "LSTM"])
def test_rnn_cells_fail_as_on_the_target_and_count_as_host_fallbacks(neuron, make, fused: str) -> None:
    module = make()
    inputs = torch.randn(2, 4)
    module(inputs)  # the CPU runs it: the failure is the device's, not the module's
    module = module.to("neuron")
    neuron.clear_op_tracking()

    with pytest.raises(NotImplementedError, match=rf"Could not run '{fused}'.*TorchNeuron.*Next step"):
        module(inputs.to("neuron"))

    assert neuron.get_fallback_ops().get(fused) == 1


def _weights(gates: int, inputs: int = 4, hidden: int = 3) -> list[torch.Tensor]:
    return [torch.randn(gates * hidden, inputs), torch.randn(gates * hidden, hidden), torch.randn(gates * hidden),
            torch.randn(gates * hidden)]


# Every call `ferry scan` TF026 flags, as code would write it (a module call runs torch.lstm / torch.gru).
_FLAGGED = {
    "torch.nn.LSTM": lambda x: torch.nn.LSTM(4, 3).to(x.device)(x),
    "torch.nn.LSTMCell": lambda x: torch.nn.LSTMCell(4, 3).to(x.device)(x),
    "torch.lstm": lambda x: torch.nn.LSTM(4, 3).to(x.device)(x[None]),
    "torch.lstm_cell": lambda x: torch.lstm_cell(x, [torch.zeros(2, 3, device=x.device)] * 2,
                                                 *[w.to(x.device) for w in _weights(4)]),
    "torch.nn.GRU": lambda x: torch.nn.GRU(4, 3).to(x.device)(x),
    "torch.nn.GRUCell": lambda x: torch.nn.GRUCell(4, 3).to(x.device)(x),
    "torch.gru": lambda x: torch.nn.GRU(4, 3).to(x.device)(x[None]),
    "torch.gru_cell": lambda x: torch.gru_cell(x, torch.zeros(2, 3, device=x.device),
                                               *[w.to(x.device) for w in _weights(3)]),
}


@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("ignore:.*runs on the host CPU")
def test_scan_flags_exactly_the_recurrent_calls_that_fail_on_the_device(neuron) -> None:
    """`ferry scan` TF026 and the device agree: each call the rule names fails on `neuron` with the fused
    kernel the rule gives (and runs on the CPU), and nn.RNN, which the rule leaves alone, runs."""
    from torchferry.scan.rules.fused_rnn import NAMES

    assert set(_FLAGGED) == set(NAMES)
    x = torch.randn(2, 4)
    for name, call in _FLAGGED.items():
        call(x)  # the CPU runs it
        with pytest.raises(NotImplementedError, match=rf"Could not run 'aten::{NAMES[name]}'"):
            call(x.to("neuron"))
    rnn = torch.nn.RNN(4, 3)
    expected, _ = rnn(x)
    out, _ = rnn.to("neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), expected)
