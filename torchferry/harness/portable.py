"""The rules a process without torchferry must apply exactly as torchferry does: a tensor's digest, a model output's tensors.

The exit loaders (check/exit_loader.py) prove that checkpoints load on a machine that never had
torchferry, so they import nothing of it. Yet they must name an output's tensors and digest a
loaded tensor by the very rules the rest of torchferry uses, or the comparison of what the target
saved with what was reloaded would compare two rules. So the rules live here, once, in a file
that imports only torch: torchferry imports it as a module, and the loaders load this file by its
path under another name (``LOADED_AS``), which keeps ``torchferry`` out of their ``sys.modules``.
"""

import hashlib

LOADED_AS = "ferry_portable"  # the module name a loader gives this file


def digest(t: "torch.Tensor") -> str:  # noqa: F821 - torch is imported where it is used: importing this is free
    """sha256 of a tensor's dtype, shape and bytes on the CPU: equal digests mean equal values (a DTensor is read as its
    local shard)."""
    import torch

    local = t.to_local() if hasattr(t, "to_local") else t
    cpu = local.detach().to("cpu").contiguous().reshape(-1)
    h = hashlib.sha256(f"{cpu.dtype}{list(local.shape)}".encode())
    if cpu.numel():
        h.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.dtype != torch.bool else cpu.numpy().tobytes())
    return h.hexdigest()


def flatten(output: object, prefix: str = "") -> dict:
    """The tensors of a model output, by name: ModelOutput/dict keys, tuple indices, or ``output``."""
    import torch

    if isinstance(output, torch.Tensor):
        return {prefix or "output": output}
    items = output.items() if hasattr(output, "items") else enumerate(output) if isinstance(output, (tuple, list)) else []
    found = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (tuple, list, dict)) and not prefix:
            found.update(flatten(value, name))
    return found

