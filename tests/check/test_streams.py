"""One random stream on any accelerator (check/streams.py): with ``draw_on_host`` a device that keeps its own generator
draws, through torch's random functions, the numbers a CPU run draws, in the same order.

The built-in device with its own stream (TORCHFERRY_RNG unset) stands for a real accelerator here: without the host
draws it draws other numbers than the CPU for the same seed (asserted), with them the same, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

DRAWS = """
import json, sys, torch
device = torch.device(sys.argv[1])
if sys.argv[2] == "host":
    from torchferry.check.streams import draw_on_host
    draw_on_host()
torch.manual_seed(7)
layer = torch.nn.Linear(6, 6).to(device)
torch.nn.init.normal_(layer.weight)
drawn = {
    "cpu_first": torch.rand(3),
    "randn": torch.randn(5, 4, device=device),
    "dropout": torch.nn.functional.dropout(torch.ones(40, device=device), 0.3, training=True),
    "module_dropout": torch.nn.Dropout(0.5)(torch.ones(2, 20, device=device)),
    "init": layer.weight.detach(),
    "randperm": torch.randperm(9, device=device),
    "randint": torch.randint(0, 100, (6,), device=device),
    "rand_like": torch.rand_like(torch.zeros(3, 3, device=device)),
    "bernoulli": torch.bernoulli(torch.full((8,), 0.5, device=device)),
    "uniform_": torch.empty(5, device=device).uniform_(-1, 1),
    "cpu_last": torch.rand(3),
}
print(json.dumps({k: v.cpu().tolist() for k, v in drawn.items()}))
"""


def draws(device: str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHFERRY_RNG", "TORCHFERRY_DEVICE")}
    if device != "cpu":
        env.update(TORCHFERRY_DEVICE="neuron", TORCHFERRY_FALLBACK="silent")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(DRAWS), device, mode], env=env, capture_output=True,
                         text=True, timeout=240, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_host_draws_give_a_device_with_its_own_generator_the_cpus_numbers():
    cpu = draws("cpu", "own")
    own = draws("neuron", "own")
    host = draws("neuron", "host")
    assert own["randn"] != cpu["randn"]  # a generator of its own: other numbers for the same seed
    assert host == cpu  # every draw, in order, the CPU's (the CPU's own draws after them too)
