"""A DCGAN-style GAN on fake data, written as the PyTorch examples write it (two optimizers, noise drawn on the device,
both models saved at the end)."""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batches", type=int, default=3)
parser.add_argument("--nz", type=int, default=8)
parser.add_argument("--out", default=".")
opt = parser.parse_args()

torch.manual_seed(999)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


class Generator(nn.Module):
    def __init__(self, nz):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 32), nn.BatchNorm1d(32), nn.ReLU(True), nn.Linear(32, 64), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(64, 32), nn.LeakyReLU(0.2, inplace=True), nn.Dropout(0.3),
                                  nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1)


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm1d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


netG, netD = Generator(opt.nz).to(device), Discriminator().to(device)
netG.apply(weights_init)
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, opt.nz, device=device)
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
dataset = torch.rand(opt.batches * 16, 64) * 2 - 1  # fake data, as --dataset fake does
loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True)

for epoch in range(opt.epochs):
    for i, real in enumerate(loader):
        real = real.to(device)
        b = real.size(0)
        netD.zero_grad()
        label = torch.full((b,), 1.0, device=device)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        noise = torch.randn(b, opt.nz, device=device)
        fake = netG(noise)
        label.fill_(0.0)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
        print(f"[{epoch}][{i}] Loss_D {(errD_real + errD_fake).item():.4f} Loss_G {errG.item():.4f}")

torch.save(netG.state_dict(), f"{opt.out}/netG.pth")
torch.save(netD.state_dict(), f"{opt.out}/netD.pth")
