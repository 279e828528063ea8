"""The ``vision`` suite: image classifiers (ViT, DeiT, Swin, ConvNeXt, ResNet, ...), forward and train.

Inputs are random ``pixel_values`` of the config's channels at the shrunk image size
(configs.IMAGE_SIZE, or what a windowed backbone needs); training is cross-entropy against random labels of the config's classes.
A second input signature under ``--compile`` is a larger batch.
"""

from __future__ import annotations

from typing import Any

from torchferry.coverage.suites.base import Suite, generator
from torchferry.harness.modes import Mode


class Vision(Suite):
    name = "vision"
    summary = "image classification (AutoModelForImageClassification)"
    modes = (Mode.FORWARD, Mode.TRAIN)
    mapping = "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"
    auto_class = "AutoModelForImageClassification"
    main_input = "pixel_values"

    def variants(self, spec: str, method: Any) -> list[tuple[str, Any]]:
        from torchferry.coverage import configs

        return configs.variants(spec, method, images=True)

    def shapes(self, batch: int, seq: int, compiled: bool) -> list[tuple[int, int]]:
        return [(batch, seq), (batch + 1, seq)] if compiled else [(batch, seq)]

    def inputs(self, model: Any, batch: int, seq: int, seed: int, method: Any) -> dict[str, Any]:
        import torch

        cfg = model.config
        size = image_size(cfg)
        channels = getattr(cfg, "num_channels", None) or 3
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=generator(seed))}


def image_size(cfg: Any) -> int:
    """The square input size a (possibly composite) vision config expects."""
    for c in (cfg, getattr(cfg, "vision_config", None), getattr(cfg, "backbone_config", None)):
        size = getattr(c, "image_size", None) if c is not None else None
        if isinstance(size, (list, tuple)):
            size = size[0]
        if isinstance(size, int):
            return size
    from torchferry.coverage import configs

    return configs.IMAGE_SIZE


SUITE = Vision()
