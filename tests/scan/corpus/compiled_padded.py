"""Train a compiled GRU tagger on sentences padded to one fixed length, so one graph serves every batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD = 0
MAX_LEN = 128


class Sentences(Dataset):
    def __init__(self, path):
        self.items = torch.load(path, weights_only=True)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        tokens, tags = self.items[i]
        return torch.as_tensor(tokens), torch.as_tensor(tags)


def pad_to_max(seqs, value):
    padded = pad_sequence([s[:MAX_LEN] for s in seqs], batch_first=True, padding_value=value)
    return F.pad(padded, (0, MAX_LEN - padded.size(1)), value=value)


def collate(batch):
    tokens, tags = zip(*batch)
    return pad_to_max(tokens, PAD), pad_to_max(tags, -100)


class Tagger(nn.Module):
    def __init__(self, vocab=20000, dim=256, num_tags=17):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.rnn = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * dim, num_tags)

    def forward(self, tokens):
        hidden, _ = self.rnn(self.embed(tokens))
        return self.out(hidden)


def main():
    device = torch.accelerator.current_accelerator()
    loader = DataLoader(Sentences("train.pt"), batch_size=64, shuffle=True, collate_fn=collate)
    model = torch.compile(Tagger().to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    for epoch in range(5):
        for tokens, tags in loader:
            tokens, tags = tokens.to(device), tags.to(device)
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), tags.flatten(), ignore_index=-100)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 100 == 0:
                print(f"step {step}: loss {loss.item():.4f}")
    torch.save(model.state_dict(), "tagger.pt")


if __name__ == "__main__":
    main()
