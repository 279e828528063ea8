"""Child-process environments that make an unchanged script's own device detection find one device.

A training script finds its device through ``torch.accelerator``, Hugging Face's detection
(accelerate's ``PartialState``), ``ACCELERATE_TORCH_DEVICE`` or ``LOCAL_RANK``. None of these can be
told a device name, so the child's environment decides what they see:

- ``cpu``: every accelerator hidden (``HIDDEN_ACCELERATORS``), the built-in device not loaded,
  accelerate told to use the CPU;
- a device registered by a package that loads at ``import torch`` through an environment variable
  (``AUTOLOAD``: torchferry's built-in ``neuron``, whose ``torch_neuronx`` stand-in is what Hugging
  Face's detection finds): that variable set, the other accelerators hidden;
- any other device (a real accelerator): the environment as it is, since the script finds it already.

The table names device types and variables as data; nothing here branches on a device's name.
"""

from __future__ import annotations

from collections.abc import Mapping

from torchferry.harness.devices import BACKEND_PROVIDERS, BUILTIN_PROVIDER, ONE_STREAM

# the variables that hide each accelerator family from a process ("" = none visible)
HIDDEN_ACCELERATORS = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": "",
                       "ZE_AFFINITY_MASK": ""}
# provider package -> the variables that load it at `import torch` (its torch.backends entry point)
AUTOLOAD = {BUILTIN_PROVIDER: {"TORCHFERRY_DEVICE": "neuron"}}
CPU_FLAGS = {"ACCELERATE_USE_CPU": "true"}


def script_environment(device: str, base: Mapping[str, str], builtin: bool, one_stream: bool = False) -> dict[str, str]:
    """The environment in which a script's usual device detection finds ``device``.

    ``builtin``: whether ``device`` is to be the built-in emulation (not a real backend installed here);
    ``one_stream``: the built-in device draws its random numbers from the CPU's stream (what a check compares).
    """
    env = {k: v for k, v in base.items() if k not in AUTOLOAD_VARIABLES and k not in CPU_FLAGS}
    device_type = device.split(":")[0]
    if device_type == "cpu":
        return {**env, **HIDDEN_ACCELERATORS, **CPU_FLAGS}
    providers = BACKEND_PROVIDERS.get(device_type, ())
    loaders = [AUTOLOAD[p] for p in providers if p in AUTOLOAD]
    if builtin and loaders:
        stream = next((ONE_STREAM[p] for p in providers if p in ONE_STREAM), {}) if one_stream else {}
        return {**env, **HIDDEN_ACCELERATORS, **loaders[0], **stream}
    return env


AUTOLOAD_VARIABLES = frozenset(k for table in (AUTOLOAD, ONE_STREAM) for variables in table.values() for k in variables)
