"""Shrinking rules: the one place that turns a transformers config into a tiny one.

Coverage asks whether an *architecture* runs on a device, not whether a 70B checkpoint fits,
so every model is built from its default config with few layers, small widths, a small
vocabulary and few experts, random weights, and nothing downloaded. Rules go by attribute
name because transformers spells the same idea many ways (``num_hidden_layers``, ``n_layer``,
``decoder_layers``...). Composite configs (a text config inside a multimodal one) are shrunk
recursively. Per-layer lists and patterns (``layer_types``, ``hybrid_override_pattern``) are
cut to the new depth keeping every distinct layer kind, so hybrid models still exercise each
block type.

``variants`` yields the full shrink first, then a milder one (depth, vocabulary and experts
only) for architectures whose width constraints the generic rules break; callers use the first
variant that builds and runs on the reference device. A method at the config's own widths
(``--method torchneuron``) gets the depth cut alone. Vision backbones (``images``) also get a
small input, one block per stage and narrow stages. Rules that a family needs because its own
widths are derived from others (MLA's head widths, Mamba-2's heads x head width, hybrid layer
placement) are written once here, by attribute, with the family that needs them named.
"""

from __future__ import annotations

import copy
import json
import zlib
from pathlib import Path
from typing import Any

LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 128
EXPERT_INTERMEDIATE = 64
VOCAB = 512
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
LORA_RANK = 32
STATE_SIZE = 16
IMAGE_SIZE = 32  # vision: input height and width
STAGE_WIDTH = 16  # vision: width of the first stage of a multi-stage backbone (later stages keep their ratios)

# attribute -> value (set when the config has the attribute with a non-None value)
WIDTH_RULES: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "embed_dim", "dim", "word_embed_proj_dim", "emb_dim",
                     "hidden_size_global"), HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads",
                     "encoder_attention_heads"), HEADS),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num",
                     "num_key_value_groups"), KV_HEADS),
    **dict.fromkeys(("head_dim", "attention_head_dim", "v_head_dim"), HEAD_DIM),
    **dict.fromkeys(("intermediate_size", "n_inner", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "d_ff",
                     "ffn_hidden_size", "mlp_dim"), INTERMEDIATE),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                     "moe_ffn_hidden_size", "ffn_dim_expert", "expert_ffn_hidden_size"), EXPERT_INTERMEDIATE),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), LORA_RANK),
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim"), HEAD_DIM // 2),
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state"), STATE_SIZE),
    "d_kv": HEAD_DIM,
    # DeepSeek sparse attention's indexer (deepseek_v32, glm_moe_dsa, hy_v4, ...): a small scorer, top-k below the prompt
    "index_n_heads": HEADS,
    "index_head_dim": HEAD_DIM,
    "index_topk": 8,
    "projection_dim": HIDDEN,
}
# widths that are a multiple of the hidden size: scaled with it (RWKV's attention = hidden, Zamba2's = 2 x hidden)
HIDDEN_MULTIPLE_KEYS = ("attention_hidden_size", "embedding_dim")
DEPTH_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers",
              "num_decoder_layers", "num_encoder_layers")
VOCAB_KEYS = ("vocab_size", "unpadded_vocab_size", "vocab_size_per_layer_input", "encoder_hash_byte_group_vocab")
# experts: count -> EXPERTS, per-token -> at most EXPERTS_PER_TOKEN, groups -> 1
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts",
                     "zero_expert_num")
EXPERT_TOPK_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k", "moe_k")
EXPERT_GROUP_KEYS = ("n_group", "topk_group", "num_expert_group")
TOKEN_ID_SUFFIX = "_token_id"


def _distinct_first(seq: list, n: int) -> list:
    """``n`` entries of a per-layer list that keep every distinct kind in first-seen order."""
    picked, seen = [], []
    for i, item in enumerate(seq):
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.append(key)
            picked.append(i)
    for i in range(len(seq)):
        if len(picked) >= n:
            break
        if i not in picked:
            picked.append(i)
    return [seq[i] for i in sorted(picked[:max(n, len(seen))])]


def _is_index_list(key: str, value: Any) -> bool:
    """A list of layer indices (``mlp_only_layers``, ``moe_layers``, ``attn_layer_indices``): strictly increasing ints."""
    return (key.endswith(("layers", "layer_indices", "_layers_idx")) and isinstance(value, list) and bool(value)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and all(a < b for a, b in zip(value, value[1:])))


def _per_layer(key: str, value: Any, depth: int) -> bool:
    """A per-layer list or pattern of length ``depth`` (``layer_types``, ``no_rope_layers`` flags), cut with the depth."""
    return (isinstance(value, (list, str)) and len(value) == depth and depth > LAYERS and not _is_index_list(key, value)
            and not (isinstance(value, str) and key.endswith(("_type", "_act", "_fn", "activation", "_proj", "implementation",
                                                               "name_or_path"))))


def _depth(cfg: Any) -> int | None:
    for key in DEPTH_KEYS:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _shrink_images(cfg: Any, widths: bool) -> None:
    """Vision backbones: a 32x32 input, one block per stage; with ``widths``, narrow stages (ratios kept)."""
    attrs = cfg.__dict__
    if isinstance(attrs.get("image_size"), int) and attrs["image_size"] > IMAGE_SIZE:
        cfg.image_size = IMAGE_SIZE
    elif isinstance(attrs.get("image_size"), (list, tuple)) and max(attrs["image_size"]) > IMAGE_SIZE:
        cfg.image_size = [IMAGE_SIZE] * len(attrs["image_size"])
    depths = attrs.get("depths")
    if isinstance(depths, (list, tuple)) and all(isinstance(d, int) for d in depths):
        cfg.depths = [min(d, 1) for d in depths]  # blocks per stage
        patch = attrs.get("patch_size")
        if isinstance(attrs.get("window_size"), int) and isinstance(patch, int):
            # Swin: windows of 2x2 tokens, and an input whose last stage still holds one whole window
            cfg.window_size = 2
            cfg.image_size = 2 * patch * 2 ** (len(depths) - 1)
    for key in ("width_coefficient", "depth_coefficient"):  # EfficientNet's scaling of a B0
        if isinstance(attrs.get(key), float) and attrs[key] > 1.0:
            setattr(cfg, key, 1.0)
    if not widths:
        return
    for key in ("hidden_sizes", "embed_dim", "embed_dims", "neck_hidden_sizes"):
        value = attrs.get(key)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value) and value[0] > STAGE_WIDTH:
            factor = value[0] // STAGE_WIDTH
            setattr(cfg, key, [max(1, v // factor) for v in value])
    heads = attrs.get("num_heads") if isinstance(attrs.get("num_heads"), (list, tuple)) else None
    if heads and all(isinstance(h, int) for h in heads):
        cfg.num_heads = [min(h, 2**i, HEADS) for i, h in enumerate(heads)]


def _shrink_one(cfg: Any, widths: bool, depth_only: bool = False) -> None:
    """Shrink one (non-composite) config in place (``depth_only``: layers and dropout, nothing else)."""
    old_depth = _depth(cfg)
    attrs = cfg.__dict__
    new_depth = LAYERS
    # per-layer lists and patterns, cut to the new depth with every distinct kind kept
    if old_depth:
        for key, value in list(attrs.items()):
            if not key.startswith("_") and key not in DEPTH_KEYS and _per_layer(key, value, old_depth):
                new_depth = max(new_depth, len(_distinct_first(list(value), LAYERS)))
        # a repeating block pattern shorter than the depth (RecurrentGemma's block_types): one full period
        if isinstance(attrs.get("block_types"), list) and 0 < len(attrs["block_types"]) < old_depth:
            new_depth = max(new_depth, len(attrs["block_types"]))
        for key, value in list(attrs.items()):
            if not key.startswith("_") and key not in DEPTH_KEYS and _per_layer(key, value, old_depth):
                cut = _distinct_first(list(value), new_depth)
                cut += [cut[-1]] * (new_depth - len(cut))
                setattr(cfg, key, "".join(cut) if isinstance(value, str) else cut)
        for key in DEPTH_KEYS:
            value = attrs.get(key)
            if isinstance(value, int) and value > new_depth:
                setattr(cfg, key, new_depth)
        # layer-index lists (e.g. mlp_only_layers, attn_layer_indices) must stay in range
        for key, value in list(attrs.items()):
            if _is_index_list(key, value):
                setattr(cfg, key, sorted({min(v, new_depth - 1) for v in value}))
        # Jamba-style periodic placement: attention / experts every `period` layers from `offset`
        for kind in ("attn", "expert"):
            period, offset = attrs.get(f"{kind}_layer_period"), attrs.get(f"{kind}_layer_offset")
            if isinstance(period, int) and isinstance(offset, int) and period > new_depth:
                setattr(cfg, f"{kind}_layer_period", new_depth)
                setattr(cfg, f"{kind}_layer_offset", min(offset, new_depth - 1))
        _depth_spellings(cfg, old_depth)
        _shared_blocks(cfg)
        if isinstance(attrs.get("num_kv_shared_layers"), int):  # Gemma 3n: the last layers reuse earlier layers' caches
            cfg.num_kv_shared_layers = 0
        for key in ("first_k_dense_replace", "num_dense_layers"):
            if isinstance(attrs.get(key), int):
                setattr(cfg, key, min(attrs[key], 1))
    # randomness that differs by device would make parity meaningless (the dynamo harness does the same)
    for key, value in list(attrs.items()):
        if ("drop" in key or "jitter" in key) and isinstance(value, float) and value > 0:
            setattr(cfg, key, 0.0)
        elif "drop" in key and isinstance(value, (list, tuple)) and value and all(isinstance(v, float) for v in value):
            setattr(cfg, key, [0.0] * len(value))  # per-stage rates (CvT's drop_path_rate)
    if depth_only:
        return
    for key in VOCAB_KEYS:
        if isinstance(attrs.get(key), int) and attrs[key] > VOCAB:
            setattr(cfg, key, VOCAB)
    vocab = attrs.get("vocab_size") if isinstance(attrs.get("vocab_size"), int) else None
    if vocab:
        for key, value in list(attrs.items()):
            if key.endswith(TOKEN_ID_SUFFIX):
                if isinstance(value, int) and value >= vocab:
                    # one of the last ids, chosen by the name (crc32, not hash(): the same in every process and shard)
                    setattr(cfg, key, vocab - 1 - zlib.crc32(key.encode()) % 4)
                elif isinstance(value, list):
                    setattr(cfg, key, [v if v < vocab else vocab - 1 for v in value if isinstance(v, int)] or None)
        _delay_pattern_tokens(cfg)
    moe = any(k in attrs for k in EXPERT_COUNT_KEYS) and attrs.get("moe_intermediate_size") is not None
    for key in EXPERT_COUNT_KEYS:
        if isinstance(attrs.get(key), int) and attrs[key] > EXPERTS or (moe and key in attrs and attrs[key] is None):
            setattr(cfg, key, EXPERTS)  # None beside a MoE width: the model builds experts anyway (dots1)
    for key in EXPERT_TOPK_KEYS:
        if isinstance(attrs.get(key), int) and attrs[key] > EXPERTS_PER_TOKEN or (moe and key in attrs and attrs[key] is None):
            setattr(cfg, key, EXPERTS_PER_TOKEN)
    if moe and "n_shared_experts" in attrs and attrs["n_shared_experts"] is None:
        cfg.n_shared_experts = 1
    for key in EXPERT_GROUP_KEYS:
        if isinstance(attrs.get(key), int) and attrs[key] > 1:
            setattr(cfg, key, 1)
    if widths:
        old_hidden = attrs.get("hidden_size")
        if isinstance(old_hidden, int) and old_hidden > HIDDEN:
            for key in HIDDEN_MULTIPLE_KEYS:
                if isinstance(attrs.get(key), int) and attrs[key] % old_hidden == 0:
                    setattr(cfg, key, attrs[key] // old_hidden * HIDDEN)
        for key, value in WIDTH_RULES.items():
            if attrs.get(key) is not None and isinstance(attrs.get(key), int) and attrs[key] > value:
                setattr(cfg, key, value)
        heads = next((attrs[k] for k in ("num_attention_heads", "n_head", "n_heads") if isinstance(attrs.get(k), int)), None)
        if heads and "num_key_value_heads" in attrs and attrs["num_key_value_heads"] is None:
            cfg.num_key_value_heads = heads  # None means multi-head attention, but some models divide by it (Nemotron)
        if heads and "head_dim" in attrs:  # None too: some models read it unguarded (Ministral, HunYuan)
            hidden = next((attrs[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(attrs.get(k), int)), None)
            if hidden:
                cfg.head_dim = hidden // heads
        # rotary parts must fit the (new) head: MLA rotates qk_rope_head_dim, GPT-J style models rotary_dim
        if isinstance(attrs.get("qk_rope_head_dim"), int) and "head_dim" in attrs:
            cfg.head_dim = attrs["qk_rope_head_dim"]
        if isinstance(attrs.get("qk_head_dim"), int) and isinstance(attrs.get("qk_nope_head_dim"), int):
            cfg.qk_head_dim = attrs["qk_nope_head_dim"] + attrs["qk_rope_head_dim"]  # MLA: derived, not shrunk by itself
        if isinstance(attrs.get("kv_lora_rank"), int) and isinstance(attrs.get("num_key_value_heads"), int):
            cfg.num_key_value_heads = attrs["num_attention_heads"]  # MLA expands its latent to every head
        if isinstance(attrs.get("rotary_dim"), int):
            cfg.rotary_dim = min(attrs["rotary_dim"], HEAD_DIM)
        _mamba_widths(cfg)
        _xlstm_widths(cfg, old_hidden)
        _indexer(cfg)
    _hybrid_attention(cfg)
    if isinstance(attrs.get("axial_pos_shape"), (list, tuple)) and len(attrs["axial_pos_shape"]) == 2:
        cfg.axial_pos_shape = (4, 4)  # Reformer trains only on sequences of exactly this product: the 16-token batch
        dims, hidden = attrs.get("axial_pos_embds_dim"), attrs.get("hidden_size")
        if isinstance(hidden, int) and isinstance(dims, (list, tuple)) and sum(dims) != hidden:
            cfg.axial_pos_embds_dim = (hidden * dims[0] // sum(dims), hidden - hidden * dims[0] // sum(dims))
    if isinstance(attrs.get("sliding_window"), int) and attrs["sliding_window"] > 32:
        cfg.sliding_window = 32  # small enough that a 16-token prompt + 8 new tokens crosses it
    cfg.use_cache = True


# Mamba-2 mixers need heads x head width == expand x hidden, with the groups dividing the heads
MAMBA_SPELLINGS = (("num_heads", "head_dim", "n_groups", "expand"),  # mamba2
                   ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_expand"),  # bamba, granitemoehybrid
                   ("n_mamba_heads", "mamba_headdim", "mamba_ngroups", "mamba_expand"))  # zamba2


def _mamba_widths(cfg: Any) -> None:
    attrs = cfg.__dict__
    hidden = attrs.get("hidden_size")
    if "mamba_d_ssm" in attrs:  # Falcon-H1 sizes its mixer by mamba_d_ssm, not expand x hidden
        return
    for heads_key, dim_key, groups_key, expand_key in MAMBA_SPELLINGS:
        if not all(isinstance(attrs.get(k), int) for k in (heads_key, dim_key, expand_key)) or not isinstance(hidden, int):
            continue
        if getattr(cfg, "model_type", "") == "mamba2" or heads_key != "num_heads":
            setattr(cfg, dim_key, HEAD_DIM)
            setattr(cfg, heads_key, attrs[expand_key] * hidden // HEAD_DIM)
            if isinstance(attrs.get(groups_key), int):
                setattr(cfg, groups_key, 1)


# Qwen4-Exp's sparse-attention indexer: unset in the default config, required by the model
INDEXER = {"indexer_n_heads": HEADS, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 8,
           "indexer_compress_ratio": 4}


def _indexer(cfg: Any) -> None:
    attrs = cfg.__dict__
    if all(k in attrs for k in INDEXER):
        for key, value in INDEXER.items():
            if attrs[key] is None or attrs[key] > value:
                setattr(cfg, key, value)


def _hybrid_attention(cfg: Any) -> None:
    """A hybrid whose default layer list has no attention layer gets one, the last (its hybrid cache needs one,
    and released checkpoints of these families have them: Bamba, GraniteMoeHybrid); LFM2-MoE's unset list is
    one convolution and one attention layer."""
    attrs = cfg.__dict__
    types = attrs.get("layer_types")
    depth = _depth(cfg)
    if types is None and "layer_types" in attrs and getattr(cfg, "model_type", "") == "lfm2_moe" and depth:
        cfg.layer_types = ["conv"] * (depth - 1) + ["full_attention"]
    elif "attn_layer_indices" in attrs and attrs["attn_layer_indices"] is None and depth:  # Bamba derives layer_types
        cfg.attn_layer_indices = [depth - 1]
    elif isinstance(types, list) and types and set(types) == {"linear_attention"}:
        cfg.layer_types = types[:-1] + ["full_attention"]
        if "attn_layer_indices" in attrs:
            cfg.attn_layer_indices = [len(types) - 1]


def _depth_spellings(cfg: Any, old_depth: int) -> None:
    """Depths a family spells twice, or derives from its own layer count, kept in step with the cut.

    - xLSTM builds ``num_blocks`` blocks but sizes its recurrent cache by ``num_hidden_layers``
      (transformers models/xlstm: ``xLSTMModel.__init__`` vs ``xLSTMCache.__init__``): a second
      spelling of the depth, cut with it.
    - HRM-Text's ``num_hidden_layers`` is not its depth but its KV-cache slots, one per attention call:
      ``num_layers_per_stack x H_cycles x (L_cycles + 1)`` (models/hrm_text: ``HrmTextConfig.__post_init__``
      and the slot formula in ``HrmTextModel.forward``). Each of its two stacks gets the depth; the
      cycles, its distinctive recurrence, stay as they are.
    """
    attrs = cfg.__dict__
    if attrs.get("num_blocks") == old_depth and isinstance(attrs.get("num_hidden_layers"), int):
        cfg.num_blocks = cfg.num_hidden_layers
    if isinstance(attrs.get("num_layers_per_stack"), int) and all(isinstance(attrs.get(k), int) for k in ("H_cycles", "L_cycles")):
        cfg.num_layers_per_stack = min(attrs["num_layers_per_stack"], LAYERS)
        cfg.num_hidden_layers = cfg.num_layers_per_stack * cfg.H_cycles * (cfg.L_cycles + 1)


# families whose layers of one kind all run one shared block (model type -> that kind): the block is what makes
# them what they are, so the cut keeps two such layers, and with one the model does not build
SHARED_BLOCK_KIND = {"zamba": "hybrid", "zamba2": "hybrid"}


def _shared_blocks(cfg: Any) -> None:
    """Zamba and Zamba2 run one shared attention block in every ``hybrid`` layer, tying the later layers' copies to
    the first (models/zamba ``ZambaModel.__init__`` ties ``layers.(?!i).shared_transf`` to layer i, which
    ``get_expanded_tied_weights_keys`` in modeling_utils.py refuses when no second layer matches; models/zamba2
    ``Zamba2Model.get_layers`` cycles ``num_mem_blocks`` blocks). Zamba2 also keeps ``hybrid_layer_ids``, derived
    from the layer kinds once in ``Zamba2Config.__post_init__`` and read by its attention and MLP adapters
    (``layer_dic``): derived again from the cut list."""
    attrs = cfg.__dict__
    kind = SHARED_BLOCK_KIND.get(getattr(cfg, "model_type", ""))
    types = attrs.get("layers_block_type")
    if kind is None or not isinstance(types, list):
        return
    if types.count(kind) == 1:
        cfg.layers_block_type = types + [kind]
        cfg.num_hidden_layers = len(cfg.layers_block_type)
    if "hybrid_layer_ids" in attrs:
        cfg.hybrid_layer_ids = [i for i, t in enumerate(cfg.layers_block_type) if t == kind]


# MusicGen's decoders embed vocab_size + 1 ids: the extra one is the pad / start token of the codebook delay pattern
DELAY_PATTERN_DECODERS = ("musicgen_decoder", "musicgen_melody_decoder")


def _delay_pattern_tokens(cfg: Any) -> None:
    """MusicGen's greedy generate builds its delay pattern with the decoder start token as the pad
    (models/musicgen ``MusicgenForCausalLM.generate``: ``build_delay_pattern_mask(pad_token_id=
    generation_config._decoder_start_token_tensor)``), and its default decoder config sets none, so the pattern
    multiplies by None. Released checkpoints (facebook/musicgen-small's generation config) set it to the pad
    token, which is the extra embedding row (``embed_dim = config.vocab_size + 1`` in ``MusicgenDecoder``):
    pad, bos and decoder start are that row of the shrunk vocabulary, as they are of the full one."""
    attrs = cfg.__dict__
    if getattr(cfg, "model_type", "") in DELAY_PATTERN_DECODERS and isinstance(attrs.get("vocab_size"), int):
        cfg.pad_token_id = cfg.bos_token_id = cfg.decoder_start_token_id = cfg.vocab_size


# xLSTM rounds its q/k and v widths up to a multiple of this for the cache (xLSTMConfig.qk_dim / v_dim)
XLSTM_DIM_MULTIPLE = 64


def _xlstm_widths(cfg: Any, old_hidden: Any) -> None:
    """xLSTM's mLSTM layer is ``int(hidden x qk_dim_factor)`` (and ``v_dim_factor``) wide, while ``xLSTMCache`` takes
    the config's ``qk_head_dim`` / ``v_head_dim``, rounded up to a multiple of 64 (models/xlstm
    ``configuration_xlstm.py`` ``qk_dim`` vs ``modeling_xlstm.py`` ``xLSTMLayer.__init__``): the two agree only when
    both products are multiples of 64, so the hidden width is the smallest multiple of HIDDEN that makes them so
    (the factors, the layer's shape, stay)."""
    attrs = cfg.__dict__
    factors = [attrs.get(k) for k in ("qk_dim_factor", "v_dim_factor")]
    if not (isinstance(old_hidden, int) and all(isinstance(f, float) for f in factors)):
        return
    width = HIDDEN
    while any((width * f) % XLSTM_DIM_MULTIPLE for f in factors) and width < old_hidden:
        width += HIDDEN
    cfg.hidden_size = width
    if isinstance(attrs.get("embedding_dim"), int):
        cfg.embedding_dim = width


def _composite(cfg: Any) -> None:
    """Rules that read across a composite config's parts, once every part is shrunk.

    - DBRX's attention reads ``attn_config.rope_theta``, which ``DbrxAttentionConfig`` does not declare, and
      clamps by ``attn_config.clip_qkv``, which torch refuses when None (models/dbrx ``DbrxAttention.__init__``,
      ``forward``): the default config does not build. Released checkpoints (databricks/dbrx-base, -instruct)
      set both in ``attn_config``: clip_qkv 8, and rope_theta, here the model's own (``rope_parameters``), which
      the rotary embedding uses.
    - BLT's global transformer reads the local encoder's patch states, ``hidden x cross_attn_k`` wide; the default
      widths make that its own width, so it projects nothing (``BltConfig.__post_init__`` decides the projection
      from the full widths): the global width and the locals' ``hidden_size_global`` follow the shrunk encoder.
      Its forward builds its caches from the top config's ``num_hidden_layers``, which ``BltConfig`` does not
      declare (models/blt ``BltModel.forward``: ``DynamicCache(config=self.config)``): one slot per layer of the
      local encoder (the self-attention cache) and of the local decoder (the cross-attention one).
    """
    attrs = cfg.__dict__
    attn = attrs.get("attn_config")
    if getattr(cfg, "model_type", "") == "dbrx" and attn is not None and isinstance(attrs.get("rope_parameters"), dict):
        attn.clip_qkv = attn.clip_qkv if attn.clip_qkv is not None else DBRX_CLIP_QKV
        attn.rope_theta = cfg.rope_parameters["rope_theta"]
    encoder, decoder, glob = (attrs.get(k) for k in ("encoder_config", "decoder_config", "global_config"))
    if all(c is not None for c in (encoder, decoder, glob)) and isinstance(attrs.get("cross_attn_k"), int):
        width = encoder.hidden_size * cfg.cross_attn_k
        if glob.hidden_size != width and glob.__dict__.get("encoder_cross_output_size") is None:
            glob.hidden_size = width
            glob.head_dim = width // glob.num_attention_heads
            encoder.hidden_size_global = decoder.hidden_size_global = width
        if "num_hidden_layers" not in attrs:
            cfg.num_hidden_layers = max(encoder.num_hidden_layers, decoder.num_hidden_layers)


DBRX_CLIP_QKV = 8.0  # attn_config.clip_qkv of the released DBRX checkpoints


def _sub_configs(cfg: Any) -> list[Any]:
    from transformers import PretrainedConfig

    return [v for k, v in vars(cfg).items() if not k.startswith("_") and isinstance(v, PretrainedConfig)]


def shrink(cfg: Any, widths: bool = True, depth_only: bool = False, images: bool = False) -> Any:
    """A shrunk deep copy of ``cfg`` (composite configs recursively; ``images``: the vision rules too)."""
    cfg = copy.deepcopy(cfg)
    stack = [cfg]
    while stack:
        c = stack.pop()
        _shrink_one(c, widths, depth_only)
        if images and not depth_only:
            _shrink_images(c, widths)
        stack.extend(_sub_configs(c))
    _composite(cfg)
    return cfg


def base_config(spec: str, method: Any = None) -> Any:
    """The config of a model spec (torchferry.workloads.model_source): a model type's default, a config file or a
    Hub id as published (a Hub id from the cache: the command fetched it), remote code only when the method trusts it."""
    import os

    from torchferry.workloads import model_source

    source = model_source.resolve(spec, Path.cwd(), environ={**os.environ, "HF_HUB_OFFLINE": "1"})
    return model_source.load_config(source, trust_remote_code=bool(method and method.trust_remote_code),
                                    auto_map_needs_trust=bool(method and method.auto_map_needs_trust))


def vendor_depth(cfg: Any) -> Any:
    """The vendor's depth cut and nothing else (``run_fwd_bwd``, torchferry.coverage.methods): 2 layers when the
    config has more than one, else 2 encoder and 2 decoder layers; widths, dropout, dtype and lists as published."""
    cfg = copy.deepcopy(cfg)
    if isinstance(getattr(cfg, "num_hidden_layers", None), int) and cfg.num_hidden_layers > 1:
        cfg.num_hidden_layers = LAYERS
    else:
        cfg.num_encoder_layers = cfg.num_decoder_layers = LAYERS
    return cfg


def run_dtype(cfg: Any, method: Any) -> Any:
    """The parameters' dtype: the config's own under a method that keeps it (float32 when it names none), else float32."""
    import torch

    dtype = getattr(cfg, "dtype", None) if method is not None and method.config_dtype else None
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def variants(spec: str, method: Any = None, images: bool = False) -> list[tuple[str, Any]]:
    """Configs to try in order: full shrink, then depth/vocab/experts only; a method at the config's own widths
    (``--method torchneuron``) gets the depth cut alone. ``images``: vision backbones' rules as well."""
    base = base_config(spec, method)
    if method is not None and method.vendor_depth:
        return [("vendor", vendor_depth(base))]
    if method is not None and not method.shrink_widths:
        return [("depth-2", shrink(base, depth_only=True))]
    return [("tiny", shrink(base, widths=True, images=images)), ("shallow", shrink(base, widths=False, images=images))]
