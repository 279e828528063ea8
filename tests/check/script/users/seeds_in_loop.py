"""A script that reseeds every epoch, reads and restores its own random state, and loads data with two worker
processes that draw random augmentations, as users write it."""
import torch
import torch.nn as nn


class Noisy(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        x = torch.full((8,), float(i))
        return x + 0.1 * torch.randn(8), torch.tensor(i % 2)  # drawn in the worker process


if __name__ == "__main__":
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 2)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        torch.manual_seed(100 + epoch)  # seeded inside the loop
        state = torch.get_rng_state()  # the script reads its own random state
        loader = torch.utils.data.DataLoader(Noisy(), batch_size=8, shuffle=True, num_workers=2)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            opt.step()
        torch.set_rng_state(state)
