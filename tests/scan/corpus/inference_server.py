"""A small batching inference server for a text classifier (FastAPI-style handler, no framework)."""

import json
import logging
import queue
import threading

import torch
import torch.nn as nn
from transformers import AutoTokenizer

log = logging.getLogger("server")


class Classifier(nn.Module):
    """Embedding bag + MLP head, with an abstain threshold on the max probability."""

    def __init__(self, vocab_size=30522, dim=256, num_labels=4, threshold=0.5):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, num_labels))
        self.threshold = threshold

    def forward(self, input_ids, offsets):
        probs = self.mlp(self.embed(input_ids, offsets)).softmax(-1)
        confident = probs.max(-1).values > self.threshold
        return probs, probs[confident]


class Server:
    def __init__(self, checkpoint, tokenizer_name, max_batch=32):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        model = Classifier()
        model.load_state_dict(torch.load(checkpoint))
        model = model.to(self.device).eval()
        example = (torch.zeros(8, dtype=torch.long, device=self.device), torch.tensor([0], device=self.device))
        self.traced = torch.jit.trace(model, example)
        self.model = torch.compile(model, mode="reduce-overhead")
        self.requests = queue.Queue()
        self.max_batch = max_batch

    @torch.inference_mode()
    def predict(self, texts):
        enc = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        ids = enc["input_ids"].to(self.device)
        lengths = enc["attention_mask"].sum(1)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]).to(self.device)
        flat = ids[enc["attention_mask"].bool().to(self.device)]
        probs, _ = self.model(flat, offsets)
        torch.cuda.synchronize()
        return probs.tolist()

    def serve_forever(self):
        while True:
            batch = [self.requests.get()]
            while len(batch) < self.max_batch and not self.requests.empty():
                batch.append(self.requests.get())
            texts = [item["text"] for item in batch]
            for item, scores in zip(batch, self.predict(texts)):
                item["reply"](json.dumps({"scores": scores}))


def main():
    server = Server("classifier.pt", "bert-base-uncased")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log.info("serving")


if __name__ == "__main__":
    main()
