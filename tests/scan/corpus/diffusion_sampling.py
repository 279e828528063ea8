"""DDPM sampling with a small UNet and a diffusers scheduler; writes a PNG grid."""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers import DDPMScheduler
from torchvision.utils import save_image


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class Block(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm = nn.GroupNorm(8, cin)
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)

    def forward(self, x, temb):
        h = self.conv(F.silu(self.norm(x)))
        return h + self.temb(temb)[:, :, None, None]


class TinyUNet(nn.Module):
    def __init__(self, ch=64, tdim=128):
        super().__init__()
        self.tdim = tdim
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down = Block(ch, ch, tdim)
        self.mid = Block(ch, ch, tdim)
        self.up = Block(2 * ch, ch, tdim)
        self.out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x, t):
        temb = timestep_embedding(t, self.tdim)
        h0 = self.inp(x)
        h1 = self.down(F.avg_pool2d(h0, 2), temb)
        h2 = self.mid(h1, temb)
        h = F.interpolate(h2, scale_factor=2)
        return self.out(self.up(torch.cat([h, h0], 1), temb))


@torch.no_grad()
def sample(unet, scheduler, n, size, device, steps):
    scheduler.set_timesteps(steps)
    x = torch.randn(n, 3, size, size, device=device)
    for i, t in enumerate(scheduler.timesteps):
        with torch.cuda.amp.autocast():
            noise_pred = unet(x, t.expand(n).to(device))
        x = scheduler.step(noise_pred, t, x).prev_sample
        if i % 10 == 0:
            print(f"step {i}: x std {x.std().item():.3f}")
    return (x.clamp(-1, 1) + 1) / 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", default="unet.pt")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--n", type=int, default=16)
    args = parser.parse_args()
    device = "cuda"
    unet = TinyUNet().to(device)
    unet.load_state_dict(torch.load(args.weights, map_location=device))
    unet = torch.compile(unet)
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    images = sample(unet, scheduler, args.n, 32, device, args.steps)
    save_image(images.float().cpu(), "samples.png", nrow=int(math.sqrt(args.n)))


if __name__ == "__main__":
    main()
