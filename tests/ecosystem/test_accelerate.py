"""accelerate's `Accelerator`, unchanged, on the built-in device: bf16 autocast, and `save_state`
failing as it does on TorchNeuron 98154b8: accelerate's Neuron path (`checkpointing.py`) calls
`torch.neuron.get_rng_state_all()`, which TorchNeuron's `torch.neuron` (`torch_neuronx/neuron.py`)
does not define."""

from __future__ import annotations
import pytest

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device


def test_accelerator_bf16_trains_and_save_state_fails_as_on_torchneuron(run_python, tmp_path):
    result = run_python(f"""
        import os, torch, torchferry.device
        torchferry.device.enable()
        from accelerate import Accelerator
        from accelerate.utils import DistributedType

        acc = Accelerator(mixed_precision="bf16")
        assert acc.device == torch.device("neuron"), acc.device
        assert acc.distributed_type == DistributedType.NO
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        seen = []
        model[0].register_forward_hook(lambda m, i, o: seen.append((o.device.type, o.dtype)))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
        model, opt, loader = acc.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=4))
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        assert set(seen) == {{("neuron", torch.bfloat16)}}, seen
        assert all(p.device.type == "neuron" and p.dtype == torch.float32 for p in model.parameters())

        try:
            acc.save_state({str(tmp_path / "state")!r})
        except AttributeError as exc:
            assert "get_rng_state_all" in str(exc), exc
        else:
            raise AssertionError("save_state passed, but TorchNeuron's torch.neuron has no get_rng_state_all")
        print("ok")
    """, env={"NEURON_RT_NUM_CORES": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
