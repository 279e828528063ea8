"""A classifier trained on a DataLoader whose last batch is short (100 samples, batches of 32), as users write it."""
import torch
import torch.nn as nn

torch.manual_seed(0)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
data = torch.utils.data.TensorDataset(torch.randn(100, 20), torch.randint(0, 3, (100,)))
loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
