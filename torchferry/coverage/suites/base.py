"""What every suite tells the coverage worker: its architectures, how to build one tiny, what to feed it, how to judge it.

The worker (torchferry.coverage.worker) owns the measurement: copies on the reference and the
target plus a float64 golden copy, the modes, parity and the row. A suite owns only what
differs between model families, so that one case runner measures every family the same way.
``Suite`` implements the transformers case (an auto class over a config mapping, shrunk by
torchferry.coverage.configs); a family overrides what its models do differently.
"""

from __future__ import annotations

from typing import Any

from torchferry.harness.modes import Mode


class Unsupported(Exception):
    """The architecture cannot be measured by this suite (e.g. it takes audio, not token ids): a skip with a reason."""


class Suite:
    """A transformers family: ``mapping`` names the auto-model mapping, ``auto_class`` the class that builds from a config."""

    name = ""
    summary = ""
    modes: tuple[Mode, ...] = (Mode.FORWARD, Mode.TRAIN)
    mapping = ""  # transformers.models.auto.modeling_auto attribute: model_type -> class name
    auto_class = ""  # transformers auto class building the model from a config
    main_input = "input_ids"
    output_name = "logits"  # what the compared output is called in a row's reason

    @property
    def source(self) -> str:
        """Where the default architecture list comes from (stated with the headline)."""
        return f"transformers {self.mapping}"

    def architectures(self) -> dict[str, str]:
        """Architecture name -> the class that runs it, as the installed packages map them."""
        from transformers.models.auto import modeling_auto

        return dict(getattr(modeling_auto, self.mapping))

    def unknown(self, names: list[str], plugins: tuple[str, ...]) -> list[str]:
        """The names this suite does not measure (config.json paths are checked by the caller)."""
        known = self.architectures()
        return [n for n in names if n not in known]

    def choices(self, plugins: tuple[str, ...]) -> list[str]:
        """The valid names, for an error message's suggestions."""
        return sorted(self.architectures())

    # -- building ----------------------------------------------------------------------
    def variants(self, spec: str, method: Any) -> list[tuple[str, Any]]:
        """Configs to try in order (the first that builds and runs on the reference is measured)."""
        from torchferry.coverage import configs

        return configs.variants(spec, method)

    def build(self, spec: str, cfg: Any, method: Any) -> Any:
        """The model with random weights in float32, or the config's dtype under a method that keeps it (the method's
        attention implementation when it forces one; its repository's code when the method trusts it)."""
        import transformers

        from torchferry.coverage.configs import run_dtype

        extra = {"attn_implementation": method.attention} if method.attention else {}
        if method.trust_remote_code:
            extra["trust_remote_code"] = True
        if getattr(cfg, "architectures", []) is None:
            cfg.architectures = []  # the auto classes iterate it when a type maps to several classes (DeiT, LeViT)
        return with_language(getattr(transformers, self.auto_class).from_config(cfg, dtype=run_dtype(cfg, method), **extra))

    def check_inputs(self, model: Any) -> None:
        """Raise Unsupported when the model does not take the inputs this suite feeds."""
        name = getattr(model, "main_input_name", self.main_input)
        if name != self.main_input:
            raise Unsupported(f"its main input is {name!r}; the {self.name} suite feeds {self.main_input!r}")

    # -- feeding and judging -----------------------------------------------------------
    def shapes(self, batch: int, seq: int, compiled: bool) -> list[tuple[int, int]]:
        """One (batch, length) per forward input signature; two under --compile (a recompile check)."""
        return [(batch, seq), (batch, seq - 4)] if compiled else [(batch, seq)]

    def inputs(self, model: Any, batch: int, seq: int, seed: int, method: Any) -> dict[str, Any]:
        """The forward's keyword arguments, on the CPU (the worker moves and casts them)."""
        return {"input_ids": token_ids(model, batch, seq, seed)}

    def output(self, out: Any) -> Any:
        """The tensor compared between devices."""
        return out.logits

    def loss(self, out: Any, inputs: dict[str, Any], seed: int) -> Any:
        """The training loss: cross-entropy of the output against labels drawn from ``seed``."""
        import torch

        logits = self.output(out).float()
        labels = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=generator(seed)).to(logits.device)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    def generation(self, model: Any) -> dict[str, Any]:
        """Extra ``generate`` keyword arguments the family needs."""
        return {}

    def prompt(self, model: Any, length: int, seed: int) -> Any:
        """Token ids a greedy generation starts from (suites with the generate mode)."""
        return token_ids(model, 1, length, seed)


def with_language(model: Any) -> Any:
    """X-MOD routes through one adapter per language and refuses to run until a default one is chosen."""
    languages = getattr(model.config, "languages", None)
    if hasattr(model, "set_default_language") and languages:
        model.set_default_language(languages[0])
    return model


def vocab_size(model: Any) -> int:
    """Ids every model part accepts: the embedding's rows, and no more than the config's vocabulary (CPM-Ant embeds
    prompt tokens beyond the vocabulary its logits cover)."""
    emb = model.get_input_embeddings()
    vocab = getattr(model.config.get_text_config(), "vocab_size", None)
    n = getattr(emb, "num_embeddings", None) or vocab
    return int(min(n, vocab) if isinstance(vocab, int) else n)


def generator(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


def token_ids(model: Any, batch: int, seq: int, seed: int, high: int | None = None) -> Any:
    """Random ids above the usual special tokens (0-3), below the vocabulary (and ``high``)."""
    import torch

    vocab = min(vocab_size(model), high) if high else vocab_size(model)
    return torch.randint(min(4, vocab - 1), vocab, (batch, seq), generator=generator(seed))
