"""Fine-tune a sequence classifier with the Hugging Face Trainer (bf16, compiled)."""

import argparse

import numpy as np
import torch
from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert-base-uncased")
    parser.add_argument("--output-dir", default="out")
    parser.add_argument("--epochs", type=int, default=3)
    return parser.parse_args()


class WeightedTrainer(Trainer):
    """Class-weighted cross entropy for an imbalanced label set."""

    def __init__(self, *args, class_weights=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = class_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = torch.nn.functional.cross_entropy(outputs.logits, labels, weight=self.class_weights)
        self.log({"train_ppl": torch.exp(loss).item()})
        return (loss, outputs) if return_outputs else loss


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    preds = np.argmax(logits, axis=-1)
    return {"accuracy": float((preds == labels).mean())}


def main():
    args = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    config = AutoConfig.from_pretrained(args.model, num_labels=2)
    model = AutoModelForSequenceClassification.from_config(config)

    raw = load_dataset("imdb")

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=512)

    data = raw.map(tokenize, batched=True, remove_columns=["text"])
    counts = torch.bincount(torch.tensor(data["train"]["label"]))
    class_weights = (counts.sum() / counts).float()

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=16,
        bf16=True,
        torch_compile=True,
        logging_steps=50,
    )
    trainer = WeightedTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["test"],
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        class_weights=class_weights.to("cuda"),
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    torch.save(trainer.model, f"{args.output_dir}/model.pt")
    torch.save(model.state_dict(), f"{args.output_dir}/weights.pt")


if __name__ == "__main__":
    main()
