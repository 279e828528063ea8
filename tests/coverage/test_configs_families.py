"""Shrinking rules for the families the generic shrink could not build (Zamba, Zamba2, xLSTM, HRM-Text, DBRX, BLT,
MusicGen's generation): each shrunk config has the property its model's code needs, checked on the config (and on a
model built on the meta device where the failure was at build), and one of them runs end to end on the device.

Which transformers code imposes each property is in the rule's docstring in torchferry/coverage/configs.py.
"""

import warnings

import pytest
from caserun import RUNS_CORRECTLY, run_case

from torchferry.coverage import configs

pytestmark = pytest.mark.slow  # coverage sweeps: builds and runs Hugging Face architectures, in worker processes


def _shrunk(arch: str):
    from transformers import CONFIG_MAPPING

    return configs.shrink(CONFIG_MAPPING[arch]())


def _meta_model(arch: str, cfg):
    """The model as the causal-LM suite builds it, on the meta device (no weights: the build's own checks only)."""
    import torch

    from torchferry.coverage import methods
    from torchferry.coverage.suites import causal_lm

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return causal_lm.SUITE.build(arch, cfg, methods.get("torchferry"))


@pytest.mark.timeout(60)
def test_zamba_keeps_two_layers_sharing_its_attention_block():
    cfg = _shrunk("zamba")
    assert cfg.layers_block_type.count("hybrid") == 2 and "linear_attention" in cfg.layers_block_type
    assert cfg.num_hidden_layers == len(cfg.layers_block_type) <= 3
    model = _meta_model("zamba", cfg)  # the tie of every later shared block to the first one builds
    hybrid = [i for i, t in enumerate(cfg.layers_block_type) if t == "hybrid"]
    first, second = (model.model.layers[i].shared_transf.self_attn.q_proj.weight for i in hybrid)
    assert first is second


@pytest.mark.timeout(60)
def test_zamba2_hybrid_layer_ids_are_derived_from_the_cut_layer_kinds():
    cfg = _shrunk("zamba2")
    assert cfg.hybrid_layer_ids == [i for i, t in enumerate(cfg.layers_block_type) if t == "hybrid"]
    assert len(cfg.hybrid_layer_ids) == 2 and cfg.num_hidden_layers == len(cfg.layers_block_type)
    assert cfg.n_mamba_heads * cfg.mamba_headdim == cfg.mamba_expand * cfg.hidden_size


def test_xlstm_layer_widths_agree_with_its_cache_and_its_depth_is_cut_in_both_spellings():
    cfg = _shrunk("xlstm")
    assert int(cfg.hidden_size * cfg.qk_dim_factor) == cfg.qk_dim  # the layer's width == the cache's (rounded) one
    assert int(cfg.hidden_size * cfg.v_dim_factor) == cfg.v_dim
    assert cfg.hidden_size == cfg.embedding_dim < 4096 and (cfg.qk_dim_factor, cfg.v_dim_factor) == (0.5, 1.0)
    assert cfg.num_blocks == cfg.num_hidden_layers == configs.LAYERS


def test_hrm_text_cache_slots_follow_its_stacks_and_cycles():
    from transformers import CONFIG_MAPPING

    default = CONFIG_MAPPING["hrm_text"]()
    cfg = configs.shrink(default)
    assert cfg.num_layers_per_stack == configs.LAYERS
    assert (cfg.H_cycles, cfg.L_cycles) == (default.H_cycles, default.L_cycles)  # the recurrence stays
    assert cfg.num_hidden_layers == cfg.num_layers_per_stack * cfg.H_cycles * (cfg.L_cycles + 1)


def test_dbrx_attention_config_has_the_values_its_attention_reads():
    cfg = _shrunk("dbrx")
    assert cfg.attn_config.clip_qkv == configs.DBRX_CLIP_QKV
    assert cfg.attn_config.rope_theta == cfg.rope_parameters["rope_theta"]
    assert cfg.ffn_config.moe_num_experts <= configs.EXPERTS and cfg.d_model == configs.HIDDEN


def test_blt_global_width_follows_the_encoder_patches_and_its_cache_has_a_depth():
    cfg = _shrunk("blt")
    enc, dec, glob = cfg.encoder_config, cfg.decoder_config, cfg.global_config
    width = enc.hidden_size * cfg.cross_attn_k
    assert glob.hidden_size == enc.hidden_size_global == dec.hidden_size_global == width
    assert glob.encoder_cross_output_size is None and glob.head_dim * glob.num_attention_heads == width
    assert cfg.num_hidden_layers == max(enc.num_hidden_layers, dec.num_hidden_layers)
    assert cfg.patcher_config.num_hidden_layers <= configs.LAYERS  # the entropy patcher is shrunk, not dropped


@pytest.mark.parametrize("arch", ["musicgen", "musicgen_melody"])
@pytest.mark.timeout(60)
def test_musicgen_decoders_start_their_delay_pattern_on_the_extra_embedding_row(arch):
    from transformers import GenerationConfig

    from torchferry.coverage.suites import causal_lm

    cfg = _shrunk(arch)
    decoder = cfg.decoder
    assert decoder.pad_token_id == decoder.bos_token_id == decoder.decoder_start_token_id == decoder.vocab_size
    assert GenerationConfig.from_model_config(decoder).decoder_start_token_id == decoder.vocab_size
    model = _meta_model(arch, cfg)
    assert {e.num_embeddings for e in model.get_input_embeddings()} == {decoder.vocab_size + 1}  # one per codebook
    assert causal_lm.SUITE.generation(model) == {"num_return_sequences": 1}


def test_token_ids_beyond_the_vocabulary_land_on_the_same_ids_in_every_process():
    import zlib

    cfg = _shrunk("gpt2")  # bos and eos are 50256, beyond the shrunk vocabulary
    assert cfg.bos_token_id == configs.VOCAB - 1 - zlib.crc32(b"bos_token_id") % 4
    assert cfg.eos_token_id == configs.VOCAB - 1 - zlib.crc32(b"eos_token_id") % 4


@pytest.mark.timeout(120)
def test_zamba_runs_forward_on_the_device_with_its_shared_block_still_shared():
    """End to end, forward only: the shared attention block stays one set of weights on the device (moving a model
    once untied shared weights: torchferry's first sweep found it), and the logits match the CPU's."""
    cases = []
    row = run_case("causal-lm", "zamba", ["forward"], case_out=cases)["forward"]
    assert row["category"] in RUNS_CORRECTLY, row["reason"]
    assert row["variant"] == "tiny" and row["checks"] == 1 and row["failed_checks"] == 0
    _, on_target = cases[0].cases(cases[0].plan())
    target = cases[0].fresh(on_target)  # the target's copy, as the forward ran it
    first, second = (layer.shared_transf.self_attn.q_proj.weight for layer in target.model.layers
                     if hasattr(layer, "shared_transf"))
    assert first is second and first.device.type == cases[0].target.type
