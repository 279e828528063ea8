"""diffusers, unchanged, on the built-in device: one DDPM training step of a tiny
`UNet2DModel` and of a tiny DiT (`DiTTransformer2DModel`), against the CPU."""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device

diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extras")


def _unet():
    torch.manual_seed(0)
    return diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                                 block_out_channels=(8, 16), norm_num_groups=4, attention_head_dim=4,
                                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def _dit():
    torch.manual_seed(0)
    return diffusers.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                           out_channels=4, num_layers=2, sample_size=8, patch_size=2,
                                           num_embeds_ada_norm=10, norm_num_groups=4)


def _unet_call(model, noisy, t):
    return model(noisy, t).sample


def _dit_call(model, noisy, t):
    labels = torch.tensor([1, 3], device=noisy.device)
    return model(noisy, timestep=t, class_labels=labels).sample


def _train_step(model, device: str, call) -> tuple[float, list[torch.Tensor]]:
    """Noise a batch with DDPM, predict the noise, one AdamW step; loss and parameters."""
    torch.manual_seed(1)
    model = copy.deepcopy(model).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    size = model.config.sample_size
    images = torch.randn(2, model.config.in_channels, size, size)
    noise = torch.randn_like(images)
    timesteps = torch.tensor([10, 50])
    noisy = diffusers.DDPMScheduler(num_train_timesteps=100).add_noise(images, noise, timesteps)
    loss = torch.nn.functional.mse_loss(call(model, noisy.to(device), timesteps.to(device)), noise.to(device))
    loss.backward()
    optimizer.step()
    assert {p.device.type for p in model.parameters()} == {torch.device(device).type}
    return loss.item(), [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("build, call", [(_unet, _unet_call), (_dit, _dit_call)], ids=["unet2d", "dit"])
def test_training_step_on_neuron_matches_cpu(neuron, build, call):
    model = build()
    cpu_loss, cpu_params = _train_step(model, "cpu", call)
    dev_loss, dev_params = _train_step(model, "neuron", call)
    assert dev_loss == pytest.approx(cpu_loss, rel=1e-5)
    before = [p.detach() for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, dev_params)), "the step moved nothing"
    for a, b in zip(cpu_params, dev_params):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
