"""Saving device tensors: torch.save/torch.load with map_location, and safetensors."""

import torch
from safetensors.torch import load_file, save_file


def test_torch_save_and_load_with_map_location(neuron, tmp_path):
    state = {"w": torch.randn(3, 4, device="neuron"), "step": 7}
    path = tmp_path / "state.pt"
    torch.save(state, path)
    on_device = torch.load(path, map_location="neuron")
    assert on_device["w"].device.type == "neuron"
    assert torch.equal(on_device["w"].cpu(), state["w"].cpu())
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], state["w"].cpu())
    default = torch.load(path)  # the storage location tag says neuron
    assert default["w"].device.type == "neuron"


def test_views_share_one_storage_after_a_round_trip(neuron, tmp_path):
    base = torch.arange(6.0, device="neuron")
    path = tmp_path / "views.pt"
    torch.save({"a": base, "b": base[2:]}, path)
    loaded = torch.load(path, map_location="neuron")
    loaded["b"][0] = -1.0
    assert loaded["a"][2].item() == -1.0


def test_safetensors_round_trip_of_a_device_state_dict(neuron, tmp_path):
    model = torch.nn.Linear(4, 3).to("neuron")
    save_file(model.state_dict(), tmp_path / "model.safetensors")  # straight from the device
    # safetensors' loader knows only its own device list, so load to CPU, then move.
    loaded = {k: v.to("neuron") for k, v in load_file(tmp_path / "model.safetensors").items()}
    fresh = torch.nn.Linear(4, 3).to("neuron")
    fresh.load_state_dict(loaded)
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key].cpu(), value.cpu())
