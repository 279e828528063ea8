"""The ``diffusers`` suite: denoisers of diffusers (UNet2D, UNet2DCondition, DiT, PixArt, SD3, Flux, AuraFlow), forward and train.

diffusers has no config mapping to shrink, so each architecture is a tiny config written here
(two blocks or layers, 32 channels, 16x16 latents): the building blocks (resnets, down/up
samplers, cross-attention, AdaLN, joint attention, rotary embeddings) at a size that runs in
seconds. Inputs are random latents, a timestep and, where the model is conditioned, random text
embeddings; the compared output is ``.sample``; training is the mean square of it (a
gradient through every block, without a noise schedule that would add nothing here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchferry.coverage.suites.base import Suite, generator
from torchferry.harness.modes import Mode

LATENT = 16  # latent height and width
TEXT_TOKENS, TEXT_DIM, POOLED_DIM = 8, 32, 32


@dataclass(frozen=True)
class Denoiser:
    cls: str  # diffusers class
    config: dict
    inputs: tuple[str, ...] = ()  # conditioning beyond sample and timestep
    channels: int = 4
    packed: bool = False  # Flux: latents as 2x2-patch tokens, with position ids
    extra: dict = field(default_factory=dict)


ARCHS: dict[str, Denoiser] = {
    "unet2d": Denoiser("UNet2DModel", dict(sample_size=LATENT, in_channels=4, out_channels=4, layers_per_block=1,
                                           block_out_channels=(32, 64), norm_num_groups=8, attention_head_dim=8,
                                           down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                           up_block_types=("AttnUpBlock2D", "UpBlock2D"))),
    "unet2d-condition": Denoiser("UNet2DConditionModel", dict(
        sample_size=LATENT, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        norm_num_groups=8, cross_attention_dim=TEXT_DIM, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
        inputs=("encoder_hidden_states",)),
    "dit": Denoiser("DiTTransformer2DModel", dict(sample_size=LATENT, in_channels=4, out_channels=4, patch_size=2,
                                                  num_layers=2, num_attention_heads=2, attention_head_dim=16,
                                                  num_embeds_ada_norm=10, norm_num_groups=8),
                    inputs=("class_labels",)),
    "pixart": Denoiser("PixArtTransformer2DModel", dict(sample_size=LATENT, in_channels=4, out_channels=4, patch_size=2,
                                                        num_layers=2, num_attention_heads=2, attention_head_dim=16,
                                                        cross_attention_dim=32, caption_channels=TEXT_DIM,
                                                        norm_num_groups=8),
                       inputs=("encoder_hidden_states", "added_cond_kwargs")),
    "sd3": Denoiser("SD3Transformer2DModel", dict(sample_size=LATENT, in_channels=4, out_channels=4, patch_size=2,
                                                  num_layers=2, num_attention_heads=2, attention_head_dim=16,
                                                  joint_attention_dim=TEXT_DIM, caption_projection_dim=32,
                                                  pooled_projection_dim=POOLED_DIM, pos_embed_max_size=32),
                    inputs=("encoder_hidden_states", "pooled_projections")),
    "flux": Denoiser("FluxTransformer2DModel", dict(patch_size=1, in_channels=16, out_channels=16, num_layers=1,
                                                    num_single_layers=1, num_attention_heads=2, attention_head_dim=16,
                                                    joint_attention_dim=TEXT_DIM, pooled_projection_dim=POOLED_DIM,
                                                    axes_dims_rope=(4, 6, 6)),
                     inputs=("encoder_hidden_states", "pooled_projections"), channels=4, packed=True),
    "auraflow": Denoiser("AuraFlowTransformer2DModel", dict(sample_size=LATENT, in_channels=4, out_channels=4,
                                                            patch_size=2, num_mmdit_layers=1, num_single_dit_layers=1,
                                                            num_attention_heads=2, attention_head_dim=16,
                                                            joint_attention_dim=TEXT_DIM, caption_projection_dim=32,
                                                            pos_embed_max_size=64),
                         inputs=("encoder_hidden_states",)),
}


class Diffusers(Suite):
    name = "diffusers"
    summary = "diffusers denoisers (UNet2D, UNet2DCondition, DiT, PixArt, SD3, Flux, AuraFlow), tiny configs in code"
    modes = (Mode.FORWARD, Mode.TRAIN)
    output_name = "sample"

    @property
    def source(self) -> str:
        return "torchferry.coverage.suites.diffusers ARCHS (tiny configs in code)"

    def architectures(self) -> dict[str, str]:
        return {name: arch.cls for name, arch in ARCHS.items()}

    def variants(self, spec: str, method: Any) -> list[tuple[str, Any]]:
        return [("tiny", ARCHS[spec])]

    def build(self, spec: str, cfg: Denoiser, method: Any) -> Any:
        import diffusers

        model = getattr(diffusers, cfg.cls)(**cfg.config).float()
        # randomness that differs by device would make parity meaningless: DiT's label embedding drops
        # class labels at random in training (class_dropout_prob, not a config field)
        for module in model.modules():
            if isinstance(getattr(module, "dropout_prob", None), float):
                module.dropout_prob = 0.0
        return model

    def check_inputs(self, model: Any) -> None:
        """Every denoiser here has its inputs written below."""

    def shapes(self, batch: int, seq: int, compiled: bool) -> list[tuple[int, int]]:
        return [(batch, seq), (batch + 1, seq)] if compiled else [(batch, seq)]

    def inputs(self, model: Any, batch: int, seq: int, seed: int, method: Any) -> dict[str, Any]:
        import torch

        arch = next(a for a in ARCHS.values() if a.cls == type(model).__name__)
        g = generator(seed)
        latents = torch.randn(batch, arch.channels, LATENT, LATENT, generator=g)
        timestep = torch.randint(1, 1000, (batch,), generator=g)
        out: dict[str, Any] = {}
        if arch.packed:  # (B, C, H, W) -> (B, H/2 * W/2, 4C) tokens with (0, row, column) ids, as the Flux pipeline packs
            half = LATENT // 2
            out["hidden_states"] = (latents.view(batch, arch.channels, half, 2, half, 2).permute(0, 2, 4, 1, 3, 5)
                                    .reshape(batch, half * half, arch.channels * 4))
            rows, cols = torch.meshgrid(torch.arange(half), torch.arange(half), indexing="ij")
            out["img_ids"] = torch.stack([torch.zeros_like(rows), rows, cols], -1).reshape(-1, 3).float()
            out["txt_ids"] = torch.zeros(TEXT_TOKENS, 3)
            out["timestep"] = timestep.float() / 1000
        elif type(model).__name__.startswith("UNet"):
            out["sample"], out["timestep"] = latents, timestep
        else:
            out["hidden_states"], out["timestep"] = latents, timestep
        if "encoder_hidden_states" in arch.inputs:
            out["encoder_hidden_states"] = torch.randn(batch, TEXT_TOKENS, TEXT_DIM, generator=g)
        if "pooled_projections" in arch.inputs:
            out["pooled_projections"] = torch.randn(batch, POOLED_DIM, generator=g)
        if "class_labels" in arch.inputs:
            out["class_labels"] = torch.randint(0, 10, (batch,), generator=g)
        if "added_cond_kwargs" in arch.inputs:
            out["added_cond_kwargs"] = {"resolution": None, "aspect_ratio": None}
        return out

    def output(self, out: Any) -> Any:
        return out.sample

    def loss(self, out: Any, inputs: dict[str, Any], seed: int) -> Any:
        return out.sample.float().square().mean()


SUITE = Diffusers()
