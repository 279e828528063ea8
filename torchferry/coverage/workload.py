"""A coverage suite's model as a workload, so that coverage steps through the harness's one case runner.

torchferry.harness.case.ModelCase runs anything with the workload protocol's ``model``, ``batch``,
``forward`` and ``loss_of`` (torchferry.workloads.protocol). Coverage's model comes from a suite
(torchferry.coverage.suites), which says how to feed and judge its family; ``SuiteWorkload`` speaks the
protocol in the suite's terms, so that the worker (torchferry.coverage.worker) adds no step loop of
its own. It also gives ``generate_options``: the arguments coverage's greedy generation adds to the
harness's (every step's scores, the suite's own, eager meaning eager).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchferry.harness.case import moved

PROMPT, NEW_TOKENS = 8, 8  # tokens a generation starts from, and generates


@dataclass(frozen=True)
class SuiteWorkload:
    """The suite's ``model`` fed by ``suite.inputs`` at the (batch, length) each step's seed draws (``shapes``), or
    by a prompt (``prompt``: the generate mode); trained on ``suite.loss`` with labels drawn from ``loss_seed``."""

    suite: Any
    model: Any
    method: Any
    shapes: dict[int, tuple[int, int]]  # a step's seed -> its (batch, length): one input signature each
    loss_seed: int
    prompt: bool = False
    compiled: bool = False  # the target's forward is compiled: generate may not compile it a second time

    def batch(self, device: Any, seed: int) -> dict[str, Any]:
        """A step's inputs on ``device``: built on the CPU (as the suite builds them), then moved."""
        if self.prompt:  # generate's first positional argument, by name
            return {"inputs": moved(self.suite.prompt(self.model, PROMPT, seed), device)}
        return moved(self.suite.inputs(self.model, *self.shapes[seed], seed, self.method), device)

    def forward(self, model: Any, batch: dict[str, Any]) -> Any:
        return model(**batch)

    def loss_of(self, output: Any, batch: dict[str, Any]) -> Any:
        return self.suite.loss(output, batch, self.loss_seed)

    def generate_options(self, model: Any) -> dict[str, Any]:
        """Exactly ``NEW_TOKENS`` (the plan's ``new_tokens``) with every step's scores (the compared logits), pad id 0, the suite's own
        arguments; eager means eager: transformers would otherwise torch.compile a static-cache generate on
        accelerators."""
        return {"min_new_tokens": NEW_TOKENS, "output_scores": True, "return_dict_in_generate": True, "pad_token_id": 0,
                "disable_compile": not self.compiled, **self.suite.generation(model)}
