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
