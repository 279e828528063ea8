"""A few DDPM training steps of a tiny diffusers UNet: noise added by the scheduler, MSE on the predicted noise."""
import sys

import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, UNet2DModel

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
                   down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
                   norm_num_groups=8).to(device)
sched = DDPMScheduler(num_train_timesteps=100)
opt = torch.optim.AdamW(unet.parameters(), lr=1e-4)
images = torch.rand(16, 3, 16, 16) * 2 - 1
for step in range(4):
    clean = images[step * 4:(step + 1) * 4].to(device)
    noise = torch.randn(clean.shape, device=device)
    t = torch.randint(0, 100, (4,), device=device)
    noisy = sched.add_noise(clean, noise, t)
    loss = F.mse_loss(unet(noisy, t).sample, noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
unet.save_pretrained(sys.argv[1] if len(sys.argv) > 1 else "unet_out")
