"""A VAE as the PyTorch examples write it: sampling in forward (reparameterisation), a summed loss, a checkpoint."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn, optim

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=4)
parser.add_argument("--out", default="vae.pt")
args = parser.parse_args()
torch.manual_seed(1)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(64, 32), nn.Linear(32, 4), nn.Linear(32, 4)
        self.fc3, self.fc4 = nn.Linear(4, 32), nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)
data = torch.rand(args.batches * 8, 64)
train_loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
model.train()
for batch_idx, x in enumerate(train_loader):
    x = x.to(device)
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(x)
    loss = loss_function(recon_batch, x, mu, logvar)
    loss.backward()
    optimizer.step()
    print(f"batch {batch_idx} loss {loss.item() / len(x):.4f}")
torch.save(model.state_dict(), args.out)
