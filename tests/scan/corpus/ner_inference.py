"""Named-entity tagging service: a compiled token classifier, word-level labels out."""

import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer


class Tagger:
    def __init__(self, name="dslim/bert-base-NER"):
        self.tokenizer = AutoTokenizer.from_pretrained(name)
        self.model = AutoModelForTokenClassification.from_pretrained(name).eval()
        self.model.to(torch.accelerator.current_accelerator())
        self.compiled = torch.compile(self.model)
        self.labels = self.model.config.id2label

    @torch.inference_mode()
    def __call__(self, sentences):
        enc = self.tokenizer(sentences, is_split_into_words=True, padding="longest", truncation=True,
                             return_tensors="pt").to(self.model.device)
        logits = self.compiled(**enc).logits
        preds = logits.argmax(-1)
        words = []
        for row, sentence in enumerate(sentences):
            word_ids = enc.word_ids(row)
            first = torch.tensor([w is not None and (j == 0 or word_ids[j - 1] != w)
                                  for j, w in enumerate(word_ids)], device=preds.device)
            tags = preds[row][first].tolist()
            words.append([(word, self.labels[t]) for word, t in zip(sentence, tags)])
        return words


def agreement(pred_tags, gold_tags, ignore=-100):
    keep = gold_tags != ignore
    return (pred_tags[keep] == gold_tags[keep]).float().mean().item()
