"""Two planted architectures for the coverage tests, registered the way a user registers their own.

``ferry-planted`` calls an op that raises on any device but the CPU (the reference), so it must
come out as an ``error`` row naming that op; ``ferry-hang`` never returns on a non-CPU device, so
it must come out as a ``timeout`` row while the sweep goes on. ``ferry-interrupt`` presses Ctrl-C:
on a non-CPU device it writes the time to ``$FERRY_TEST_SIGINT_STAMP`` and sends SIGINT to the
`ferry` process (its worker's parent), then waits to be killed.
"""

import os
import signal
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class PlantedConfig(PretrainedConfig):
    model_type = "ferry-planted"

    def __init__(self, vocab_size=64, hidden_size=16, num_hidden_layers=1, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        super().__init__(**kwargs)


class HangConfig(PretrainedConfig):
    model_type = "ferry-hang"

    def __init__(self, vocab_size=64, hidden_size=16, num_hidden_layers=1, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        super().__init__(**kwargs)


def host_only_op(x):
    """An op with a CPU kernel only: what a missing device kernel looks like to the user."""
    if x.device.type != "cpu":
        raise NotImplementedError(f"planted_op has no kernel for device {x.device.type!r}")
    return x * 2


class PlantedForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = PlantedConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids, **kwargs):
        return CausalLMOutput(logits=self.head(host_only_op(self.embed(input_ids))))


class HangForCausalLM(PlantedForCausalLM):
    config_class = HangConfig

    def forward(self, input_ids, **kwargs):
        while input_ids.device.type != "cpu":
            time.sleep(0.05)
        return CausalLMOutput(logits=self.head(self.embed(input_ids)))


class InterruptConfig(PretrainedConfig):
    model_type = "ferry-interrupt"

    def __init__(self, vocab_size=64, hidden_size=16, num_hidden_layers=1, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        super().__init__(**kwargs)


class InterruptForCausalLM(PlantedForCausalLM):
    config_class = InterruptConfig

    def forward(self, input_ids, **kwargs):
        if input_ids.device.type != "cpu":
            with open(os.environ["FERRY_TEST_SIGINT_STAMP"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(3600)
        return CausalLMOutput(logits=self.head(self.embed(input_ids)))


for config, model in ((PlantedConfig, PlantedForCausalLM), (HangConfig, HangForCausalLM),
                      (InterruptConfig, InterruptForCausalLM)):
    AutoConfig.register(config.model_type, config)
    AutoModelForCausalLM.register(config, model)
