"""Fine-tune a small encoder-decoder summarizer with PyTorch Lightning."""

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, DataCollatorForSeq2Seq, T5Config, T5ForConditionalGeneration


class Summarizer(L.LightningModule):
    def __init__(self, lr=3e-4):
        super().__init__()
        self.model = T5ForConditionalGeneration(T5Config(num_layers=4, d_model=256, num_heads=4, d_ff=1024))
        self.lr = lr

    def forward(self, input_ids, attention_mask, labels=None):
        longest = int(attention_mask.sum(-1).max())
        input_ids, attention_mask = input_ids[:, :longest], attention_mask[:, :longest]
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def training_step(self, batch, batch_idx):
        out = self(**batch)
        self.log("train_loss", out.loss, prog_bar=True)
        return out.loss

    def validation_step(self, batch, batch_idx):
        out = self(**batch)
        self.log("val_loss", out.loss.item())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class Batches:
    def __init__(self, tokenizer, pairs):
        self.tokenizer, self.pairs = tokenizer, pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        doc, summary = self.pairs[i]
        enc = self.tokenizer(doc, truncation=True, max_length=512)
        enc["labels"] = self.tokenizer(text_target=summary, truncation=True, max_length=64)["input_ids"]
        return enc


def main(pairs, val_pairs):
    tokenizer = AutoTokenizer.from_pretrained("t5-small")
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, pad_to_multiple_of=64)
    train = DataLoader(Batches(tokenizer, pairs), batch_size=16, shuffle=True, collate_fn=collate)
    val = DataLoader(Batches(tokenizer, val_pairs), batch_size=32, collate_fn=collate)
    module = Summarizer()
    module.model = torch.compile(module.model)
    trainer = L.Trainer(max_epochs=3, precision="bf16-mixed", accelerator="auto", devices="auto")
    trainer.fit(module, train, val)
    torch.save(module.model.state_dict(), "summarizer.pt")
