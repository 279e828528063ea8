"""Fixtures shared by every test folder."""

import signal

import pytest


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal (a background job inherits it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def mlp_case():
    """``mlp_case(mode, steps=3, **plan)``: the built-in mlp workload on the CPU as a harness ModelCase (seed 5; ``plan``:
    other StepPlan fields)."""
    import torch

    from torchferry.harness.case import ModelCase, StepPlan
    from torchferry.workloads.protocol import load_workload

    def make(mode, steps: int = 3, **plan) -> ModelCase:
        torch.manual_seed(0)
        workload = load_workload("mlp", {"mode": mode})
        return ModelCase(workload, torch.device("cpu"), StepPlan(mode=mode, seed=5, steps=steps, eval_seed=9, **plan))

    return make
