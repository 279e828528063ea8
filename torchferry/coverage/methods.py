"""How a coverage case is sized and stepped: torchferry's own method, or the vendor's (``--method``).

``torchferry`` (the default) shrinks every width so that a full sweep runs on a laptop, and
judges three modes. ``torchneuron`` does what AWS's own torch-neuronx model sweep does
(``VENDOR_SOURCE``: ``run_fwd_bwd`` in ``tests/huggingface/hf_moduscope.py``), so that a figure
can be set beside theirs. Read from their code, not their comments:

- ``AutoConfig.from_pretrained(config, trust_remote_code=True)``: the config as published, its own
  dtype (``AutoModelForCausalLM.from_config`` builds in ``config.dtype``: 20 of their 45 configs are
  16-bit) and its own dropout (the model is left in training mode);
- ``num_hidden_layers = 2`` when the config has more than one layer, else ``num_encoder_layers`` and
  ``num_decoder_layers = 2``; every width as published;
- ``_attention_implementation = "eager"`` is set, but transformers reads ``_attn_implementation``:
  it changes nothing, so the model runs its default attention (SDPA where it has it);
- one batch of 1x1024 ids in [0, 1024) with an all-ones mask and labels, one forward and one
  backward of the model's own loss (``logits.sum()`` when it has none), no optimizer step;
- remote code is trusted for every config with an ``auto_map``; here such a config is a skip with
  that reason unless ``--trust-remote-code`` is given.

There, a case passes when it does not raise; here both devices' loss and gradients are also
compared (both runs draw the same dropout masks: each starts from the same seed). No float64
golden copy is made at full width (the parity rule then judges by allclose alone). A model whose
copies would not fit ``--memory-gb`` (``copies`` x its parameters x the bytes of its dtype) is
``host-limit``, never run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torchferry.errors import UsageError
from torchferry.harness.modes import Mode


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    suites: tuple[str, ...] | None  # the suites it applies to (None: every suite)
    modes: tuple[Mode, ...] | None  # the modes it runs (None: each suite's own)
    shrink_widths: bool  # shrink widths, vocabulary and experts (False: depth only, the config's own widths)
    vendor_depth: bool  # the vendor's depth cut alone (2 layers; nothing else changed: dropout, dtype, lists as published)
    config_dtype: bool  # build in the config's own dtype (False: float32)
    auto_map_needs_trust: bool  # any config with an auto_map runs remote code, as the vendor's does (False: as transformers)
    attention: str | None  # forced attention implementation (None: the model's default)
    batch: int
    seq: int
    optimizer_steps: int  # train: SGD steps (0: one forward and one backward, no optimizer)
    model_loss: bool  # train: the model's own loss from labels (False: the suite's loss)
    golden: bool  # a float64 golden copy on the reference
    copies: int  # parameter-sized buffers a case holds (model, two copies, two gradients, slack) for the memory check; 0: none
    source: str | None = None  # where the settings were taken from
    trust_remote_code: bool = False  # --trust-remote-code: a config's repository code may run (set per sweep)

    def settings(self) -> dict:
        """The method's settings as the report prints them, with the file they come from."""
        return {"name": self.name, "summary": self.summary, "source": self.source, "batch": self.batch, "seq": self.seq,
                "widths": "shrunk" if self.shrink_widths else "the config's own",
                "depth": "2 layers (the vendor's cut)" if self.vendor_depth else "2 layers (configs.py)",
                "dtype": "the config's own" if self.config_dtype else "float32",
                "dropout": "as configured" if self.vendor_depth else "off (parity)",
                "attention": self.attention or "the model's default (SDPA where it has it)",
                "optimizer_steps": self.optimizer_steps, "loss": "the model's own" if self.model_loss else "the suite's",
                "remote_code": "trusted (--trust-remote-code)" if self.trust_remote_code else
                ("a config with an auto_map is skipped: it needs --trust-remote-code" if self.auto_map_needs_trust
                 else "refused unless --trust-remote-code, as transformers")}


VENDOR_SOURCE = ("tests/huggingface/hf_moduscope.py run_fwd_bwd, TorchNeuron source snapshot "
                 "parmoham-aws/test-repo-parmoham @ 98154b8")


TORCHFERRY = Method("torchferry", "tiny widths (configs.py), batch 2 x 16 tokens, forward/generate/train with 2 SGD steps",
                    suites=None, modes=None, shrink_widths=True, vendor_depth=False, config_dtype=False,
                    auto_map_needs_trust=False, attention=None, batch=2, seq=16, optimizer_steps=2,
                    model_loss=False, golden=True, copies=0, source="torchferry/coverage/configs.py")
TORCHNEURON = Method("torchneuron", "AWS torch-neuronx's sweep: 2 layers at the config's widths, its dtype and dropout, "
                     "default (SDPA) attention, one forward+backward of the model's loss at 1x1024 tokens",
                     suites=("causal-lm",), modes=(Mode.TRAIN,), shrink_widths=False, vendor_depth=True, config_dtype=True,
                     auto_map_needs_trust=True, attention=None, batch=1, seq=1024, optimizer_steps=0,
                     model_loss=True, golden=False, copies=6, source=VENDOR_SOURCE)
METHODS = {m.name: m for m in (TORCHFERRY, TORCHNEURON)}


def get(name: str, trust_remote_code: bool = False) -> Method:
    """The method of a name (remote code trusted when asked); a usage error listing the valid ones otherwise."""
    try:
        return replace(METHODS[name], trust_remote_code=trust_remote_code)
    except KeyError:
        raise UsageError(f"--method {name!r} is not a coverage method; valid: "
                         + "; ".join(f"{m.name} ({m.summary})" for m in METHODS.values()) + ".") from None
