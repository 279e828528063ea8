"""Part-of-speech tagger: word embeddings, a bidirectional LSTM and a GRU-cell decoder, trained per epoch."""

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab, tags, dim=128, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.decoder = nn.GRUCell(2 * hidden + tags, hidden)
        self.proj = nn.Linear(hidden, tags)
        self.tags = tags

    def forward(self, words):
        states, _ = self.encoder(self.embed(words))
        h = states.new_zeros(words.shape[0], self.decoder.hidden_size)
        prev = states.new_zeros(words.shape[0], self.tags)
        scores = []
        for t in range(words.shape[1]):
            h = self.decoder(torch.cat([states[:, t], prev], dim=-1), h)
            logits = self.proj(h)
            prev = torch.softmax(logits, dim=-1)
            scores.append(logits)
        return torch.stack(scores, dim=1)


def train(model, loader, epochs=3):
    device = torch.accelerator.current_accelerator()
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        total = torch.zeros((), device=device)
        for words, tags in loader:
            words, tags = words.to(device), tags.to(device)
            loss = nn.functional.cross_entropy(model(words).flatten(0, 1), tags.flatten(), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
        print(f"epoch loss {total.item() / len(loader):.3f}")
