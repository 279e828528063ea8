"""DCGAN on 64x64 images: alternate discriminator and generator updates, log every 50 iterations."""

import torch
import torch.nn as nn
import torch.optim as optim
import torchvision.datasets as dset
import torchvision.transforms as transforms
import torchvision.utils as vutils

nz, ngf, ndf = 100, 64, 64


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 3, 4, 2, 1, bias=False), nn.Tanh(),
        )

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
        )

    def forward(self, x):
        return self.main(x).view(-1)


def main(dataroot="celeba", epochs=5, batch_size=128):
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    data = dset.ImageFolder(dataroot, transform=transforms.Compose([
        transforms.Resize(64), transforms.CenterCrop(64), transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]))
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=2)
    netG, netD = Generator().to(device), Discriminator().to(device)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(64, nz, 1, 1, device=device)
    optD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for epoch in range(epochs):
        for i, (real, _) in enumerate(loader):
            real = real.to(device)
            b = real.size(0)
            netD.zero_grad()
            out_real = netD(real)
            err_real = criterion(out_real, torch.ones(b, device=device))
            err_real.backward()
            D_x = out_real.mean().item()
            fake = netG(torch.randn(b, nz, 1, 1, device=device))
            out_fake = netD(fake.detach())
            err_fake = criterion(out_fake, torch.zeros(b, device=device))
            err_fake.backward()
            optD.step()
            netG.zero_grad()
            out = netD(fake)
            errG = criterion(out, torch.ones(b, device=device))
            errG.backward()
            optG.step()
            if i % 50 == 0:
                print(f"[{epoch}/{epochs}][{i}/{len(loader)}] D(x) {D_x:.3f} G loss {errG.item():.3f}")
        with torch.no_grad():
            vutils.save_image(netG(fixed_noise).cpu(), f"epoch_{epoch}.png", normalize=True)
    torch.save(netG, "generator.pt")
    torch.save(netD.state_dict(), "discriminator.pt")


if __name__ == "__main__":
    main()
