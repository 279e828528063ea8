"""PyTorch's ModuleInfo inputs on the device and on the CPU: what TestModule's parity checks.

Device-generic tests over `torch.testing._internal.common_modules.module_db`, instantiated
for the CPU and the PrivateUse1 backend like test_ops.py:

- `test_cpu_parity`: a module built on the CPU and moved with `.to(device)` (what a
  user's `model.to("neuron")` does) gives the CPU module's outputs, input gradients
  and parameter gradients, in training and in eval mode.

The CI subset is the first `CI_INPUTS` inputs of `CI_MODULES` at float32; TORCHFERRY_CONFORMANCE=full takes every
ModuleInfo at float32 and float64. A ModuleInfo that marks PyTorch's own
`TestModule.test_cpu_gpu_parity` as failing or skipped on every device is left out.
"""

from __future__ import annotations

import copy
from typing import Any

import torchferry.device

# The PrivateUse1 test base joins common_device_type's list when that module is first
# imported, so the device is registered before the imports below.
torchferry.device.enable()

import torch  # noqa: E402
from torch.testing._internal.common_device_type import instantiate_device_type_tests  # noqa: E402
from torch.testing._internal.common_modules import module_db, modules  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

import conformance_harness as harness  # noqa: E402
import pytest

pytestmark = pytest.mark.slow  # OpInfo/ModuleInfo sweeps over the built-in device

# Layers of the common model families: linear, convolution, normalisation, recurrent,
# attention, embedding, activations, losses.
CI_MODULES = (
    "nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.RMSNorm", "nn.Embedding",
    "nn.GRU", "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.GELU", "nn.MaxPool2d",
    "nn.CrossEntropyLoss",
)
# CI runs the first inputs of each module only; a full run takes every input.
CI_INPUTS = 3
FULL = harness.mode() == "full"
_by_name = {info.name: info for info in module_db}
MODULES = [info for info in (module_db if FULL else [_by_name[name] for name in CI_MODULES])
           if not harness.declared_broken(info, "TestModule", "test_cpu_gpu_parity")]
DTYPES = harness.dtypes((torch.float32, torch.float64) if FULL else (torch.float32,))
INPUTS = harness.sample_limit(None if FULL else CI_INPUTS)


def _leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _forward_backward(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[Any, list, list]:
    """(outputs, input gradients, parameter gradients) of one forward and a backward of
    the sum of the differentiable outputs, from seed 0 (dropout draws the same)."""
    torch.manual_seed(0)
    output = module(*args, **kwargs)
    outs = [t for t in _leaves(output) if t.requires_grad]
    inputs = [t for t in _leaves((args, kwargs)) if t.requires_grad]
    params = [p for p in module.parameters() if p.requires_grad]
    if not outs or not inputs + params:
        return output, [], []
    grads = torch.autograd.grad(outs, inputs + params, [torch.ones_like(t) for t in outs], allow_unused=True)
    return output, list(grads[:len(inputs)]), list(grads[len(inputs):])


class TestModuleConformance(TestCase):
    @modules(MODULES, allowed_dtypes=DTYPES)
    def test_cpu_parity(self, device: str, dtype: torch.dtype, module_info: Any, training: bool) -> None:
        module_inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                                       requires_grad=True, training=training)
        ran = 0
        for index, module_input in enumerate(module_inputs[:INPUTS]):
            if module_input.forward_input is None:
                continue
            what = f"input {index} ({module_input.desc or 'default'})"
            ctor = module_input.constructor_input
            torch.manual_seed(0)
            on_cpu = module_info.module_cls(*ctor.args, **ctor.kwargs).to(dtype).train(training)
            on_device = copy.deepcopy(on_cpu).to(device)
            fwd = module_input.forward_input
            moved = harness.transfer((fwd.args, fwd.kwargs), device)  # before a forward can write them
            expected = _forward_backward(on_cpu, fwd.args, fwd.kwargs)
            actual = _forward_backward(on_device, *moved)
            for name, e, a in zip(("outputs", "input gradients", "parameter gradients"), expected, actual):
                self.assertEqual([t.device.type for t in _leaves(a)],
                                 [torch.device(device).type if t.device.type == "cpu" else t.device.type
                                  for t in _leaves(e)], msg=f"{what}: {name} on the wrong device")
                self.assertEqual(tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, a), e,
                                 msg=f"{what}: {name} differ from the CPU's")
            ran += 1
        if not ran:
            self.skipTest(f"{module_info.name} has no input with a forward call at {dtype}")


instantiate_device_type_tests(TestModuleConformance, globals(), only_for=("cpu", "privateuse1"))
