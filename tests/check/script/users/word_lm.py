"""A word-level language model as the PyTorch examples write it: a Transformer over batchified tokens, dropout, gradient
clipping, a plain SGD update, the model saved whole through an open file, and a last batch shorter than the others."""
import argparse

import math

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--bptt", type=int, default=7)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--save", default="model.pt")
parser.add_argument("--device", default=None, help="cpu, cuda, neuron, ... (default: the accelerator, if any)")
args = parser.parse_args()
torch.manual_seed(1111)
if args.device:
    device = torch.device(args.device)
else:
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=500):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(src.device)
        src = self.pos_encoder(self.input_emb(src) * math.sqrt(self.ninp))
        output = self.transformer_encoder(src, mask)
        return torch.log_softmax(self.decoder(output), dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous().to(device)


corpus = torch.randint(0, 50, (200,))
train_data = batchify(corpus, 4)
model = TransformerModel(50, 16, 2, 32, 2).to(device)
criterion = nn.NLLLoss()
lr = 5.0
model.train()
for epoch in range(args.epochs):
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        seq_len = min(args.bptt, len(train_data) - 1 - i)
        data, targets = train_data[i:i + seq_len], train_data[i + 1:i + 1 + seq_len].view(-1)
        model.zero_grad()
        output = model(data)
        loss = criterion(output.view(-1, 50), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        print(f"epoch {epoch} batch {batch} loss {loss.item():.3f}")
with open(args.save, "wb") as f:
    torch.save(model, f)
