"""accelerate's `Accelerator`, unchanged, on the built-in device: bf16 autocast, and
`save_state`/`load_state` bringing back the RNG state of every neuron device."""

from __future__ import annotations
import pytest

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device


def test_accelerator_bf16_and_state_round_trip_with_every_devices_rng(run_python, tmp_path):
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

        for i in range(torch.neuron.device_count()):
            torch.neuron.manual_seed_all(0)
            torch.rand(i + 1, device=f"neuron:{{i}}")  # a different state on each device
        acc.save_state({str(tmp_path / "state")!r})
        saved = torch.load({str(tmp_path / "state" / "random_states_0.pkl")!r}, weights_only=False)
        assert len(saved["torch_neuron_manual_seed"]) == torch.neuron.device_count() == 2
        expected = [torch.rand(3, device=f"neuron:{{i}}").cpu() for i in range(2)]
        params = [p.detach().cpu().clone() for p in model.parameters()]
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        acc.load_state({str(tmp_path / "state")!r})
        again = [torch.rand(3, device=f"neuron:{{i}}").cpu() for i in range(2)]
        assert all(torch.equal(a, b) for a, b in zip(expected, again)), "RNG state not restored"
        assert not torch.equal(expected[0], expected[1]), "the two devices' streams should differ"
        assert all(torch.equal(a, b.detach().cpu()) for a, b in zip(params, model.parameters()))
        print("ok")
    """, env={"NEURON_RT_NUM_CORES": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
