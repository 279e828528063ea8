"""Turn a training checkpoint into release artifacts: EMA weights, a deployable model, statistics."""

import argparse
import copy

import torch
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self, features=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 1))
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("std", torch.ones(features))

    def forward(self, x):
        return self.net((x - self.mean) / self.std)

    def export(self, path):
        torch.save(self, path)


def ema_weights(model, ema_state):
    ema = copy.deepcopy(model)
    ema.load_state_dict(ema_state)
    return ema


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--out", default="release")
    args = parser.parse_args()

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    model = Regressor()
    model.load_state_dict(state["model"])
    ema = ema_weights(model, state["ema"])

    torch.save(model.state_dict(), f"{args.out}/weights.pt")
    torch.save(state["ema"], f"{args.out}/ema_weights.pt")
    stats = {"mean": model.mean.clone(), "std": model.std.clone()}
    torch.save(stats, f"{args.out}/stats.pt")
    torch.save(ema, f"{args.out}/ema_model.pt")
    torch.save({"model": model.eval(), "step": state["step"]}, f"{args.out}/deploy.pt")
    model.export(f"{args.out}/model.pt")


if __name__ == "__main__":
    main()
