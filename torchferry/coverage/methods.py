"""How a coverage case is sized and stepped: torchferry's own method, or the vendor's (``--method``).

``torchferry`` (the default) shrinks every width so that a full sweep runs on a laptop, and
judges three modes. ``torchneuron`` reproduces the settings of AWS's own torch-neuronx model
sweep, so that a figure can be set beside theirs: ``tests/huggingface/hf_moduscope.py``
``run_fwd_bwd`` in the TorchNeuron source snapshot (parmoham-aws/test-repo-parmoham @ 98154b8)
takes a model's config unchanged except ``num_hidden_layers = 2`` (or 2 encoder and decoder
layers) and ``_attention_implementation = "eager"``, feeds one batch of 1024 token ids in
[0, 1024) with an all-ones attention mask and labels, and runs one forward and one backward of
the model's own loss (``logits.sum()`` when it has none). There, a case passes when it does not
raise; here both devices' loss and gradients are also compared. The vendor fetches the top
model's config per architecture from the Hub; this method takes transformers' default config
(pass their committed ``*_config.json`` files as architectures to use exactly theirs). No float64
golden copy is made at full width (the parity rule then judges by allclose alone), and a model
whose copies would not fit ``--memory-gb`` is skipped with its size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchferry.errors import UsageError
from torchferry.harness.modes import Mode


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    suites: tuple[str, ...] | None  # the suites it applies to (None: every suite)
    modes: tuple[Mode, ...] | None  # the modes it runs (None: each suite's own)
    shrink_widths: bool  # shrink widths, vocabulary and experts (False: depth only, the config's own widths)
    attention: str | None  # forced attention implementation (None: the model's default)
    batch: int
    seq: int
    optimizer_steps: int  # train: SGD steps (0: one forward and one backward, no optimizer)
    model_loss: bool  # train: the model's own loss from labels (False: the suite's loss)
    golden: bool  # a float64 golden copy on the reference
    bytes_per_param: int  # model + reference + target copies and both gradients, for the memory check


TORCHFERRY = Method("torchferry", "tiny widths (configs.py), batch 2 x 16 tokens, forward/generate/train with 2 SGD steps",
                    suites=None, modes=None, shrink_widths=True, attention=None, batch=2, seq=16, optimizer_steps=2,
                    model_loss=False, golden=True, bytes_per_param=0)
TORCHNEURON = Method("torchneuron", "AWS torch-neuronx's sweep: 2 layers at the config's widths, eager attention, "
                     "one forward+backward of the model's loss at 1x1024 tokens", suites=("causal-lm",),
                     modes=(Mode.TRAIN,), shrink_widths=False, attention="eager", batch=1, seq=1024, optimizer_steps=0,
                     model_loss=True, golden=False, bytes_per_param=24)
METHODS = {m.name: m for m in (TORCHFERRY, TORCHNEURON)}


def get(name: str) -> Method:
    """The method of a name; a usage error listing the valid ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise UsageError(f"--method {name!r} is not a coverage method; valid: "
                         + "; ".join(f"{m.name} ({m.summary})" for m in METHODS.values()) + ".") from None
