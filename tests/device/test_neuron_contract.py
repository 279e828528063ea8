"""The `torch.neuron` contract, checked against TorchNeuron's source.

`tests/device/data/torchneuron_contract.json` is generated from the TorchNeuron snapshot by
`tools/gen_neuron_contract.py` (its `torch.neuron` module `torch_neuronx/neuron.py`, its
`torch.neuron.memory`, and `torch_neuronx/__init__.py`). Every public name is compared with ours:
that it exists, its parameters (name, kind, default) and the shape of what it returns, by calling
it. Each difference that stays is in `DIFFERENCES` with its reason, and a listed difference that
no longer differs fails too, so that the list stays true.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

CONTRACT = json.loads((Path(__file__).parent / "data" / "torchneuron_contract.json").read_text())
MODULES = CONTRACT["modules"]

# (module, name) -> why ours differs from TorchNeuron's. Names TorchNeuron lacks that we offer, and
# the reverse, are here too.
DIFFERENCES: dict[tuple[str, str], str] = {
    ("torch.neuron", "get_executed_ops"): "a torchferry extension (TorchNeuron has it on torch_neuronx, as a list): "
                                          "the harness reads op counts through the registered device module",
    ("torch.neuron", "get_fallback_ops"): "a torchferry extension, as get_executed_ops",
    ("torch.neuron", "clear_op_tracking"): "a torchferry extension, as get_executed_ops",
    ("torch_neuronx", "distributed"): "the stand-in does not offer TorchNeuron's submodules: its process-group "
                                      "backend is registered by torchferry.device.enable() (torch.distributed)",
    ("torch_neuronx", "profiling"): "the stand-in does not offer the submodule; NeuronProfiler is offered",
    ("torch_neuronx", "python_ops"): "TorchNeuron's op registrations: the built-in device registers its own",
    ("torch_neuronx", "nki_op"): "NKI kernels compile for NeuronCores only: the stand-in raises an AttributeError "
                                 "that says so",
    ("torch_neuronx", "wrap_nki"): "NKI kernels compile for NeuronCores only, as nki_op",
}

# How to call a function whose parameters have no default, to see the shape of what it returns.
ARGUMENTS: dict[str, Callable[[Any], tuple]] = {
    "device": lambda m: (0,),
    "manual_seed": lambda m: (0,),
    "manual_seed_all": lambda m: (0,),
    "set_device": lambda m: (0,),
    "set_rng_state": lambda m: (torch.neuron.get_rng_state(),),
    "set_stream": lambda m: (torch.neuron.current_stream(),),
    "stream": lambda m: (torch.neuron.current_stream(),),
    "StreamContext": lambda m: (torch.neuron.current_stream(),),
    "wait_stream": lambda m: (torch.neuron.current_stream(),),
    "wait_event": lambda m: (torch.neuron.record_event(),),
    "get_device_properties": lambda m: (0,),
}


def _context_manager(value: Any) -> bool:
    return hasattr(value, "__enter__") and hasattr(value, "__exit__")


# The shape a contract's return names -> a check of the value ours returned.
SHAPES: dict[str, Callable[[Any], bool]] = {
    "None": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list),
    "list[NeuronCompilationMetrics]": lambda v: isinstance(v, list),  # the records: test_dynamo_metrics_records
    "dict[str, Any]": lambda v: isinstance(v, dict),
    "Stream": lambda v: isinstance(v, torch.Stream),
    "Event": lambda v: isinstance(v, torch.Event),
    "ByteTensor": lambda v: isinstance(v, torch.Tensor) and v.dtype == torch.uint8,
    "StreamContext": _context_manager,
    "device": _context_manager,
    "Device properties": lambda v: isinstance(v.name, str) and isinstance(v.total_memory, int),
    "NeuronProfiler": lambda v: type(v).__name__ == "NeuronProfiler",
}
# Returns the generator could not resolve from the source (no annotation, no delegation, no docstring).
UNRESOLVED = {"unknown"}


def _ours(module: str) -> types.ModuleType:
    if module == "torch_neuronx":
        import torch_neuronx

        return torch_neuronx
    return {"torch.neuron": torch.neuron, "torch.neuron.memory": torch.neuron.memory}[module]


def _public(module: types.ModuleType) -> set[str]:
    names = getattr(module, "__all__", None)
    return set(names) if names is not None else {n for n in vars(module) if not n.startswith("_")}


def _parameters(value: Any) -> list[dict[str, str]]:
    signature = inspect.signature(value)
    return [{"name": p.name, "kind": p.kind.name,
             "default": "" if p.default is inspect.Parameter.empty else repr(p.default)}
            for p in signature.parameters.values()]


def _entries(kind: str | None = None) -> list[tuple[str, str]]:
    return [(module, name) for module, names in MODULES.items() for name, entry in names.items()
            if kind is None or entry["kind"] == kind]


@pytest.fixture
def contract_env(neuron):
    from torchferry.device import standin

    standin.install()
    return neuron


def test_the_contract_was_generated_from_the_snapshot_the_profile_names():
    from torchferry.device.profile import load_profile

    profile = load_profile()
    assert CONTRACT["source_commit"] == profile.native_ops.source_commit
    assert {"torch.neuron", "torch.neuron.memory", "torch_neuronx"} <= MODULES.keys()
    assert {"wait_stream", "wait_event", "record_event", "query", "get_dynamo_metrics"} <= MODULES["torch.neuron"].keys()


@pytest.mark.parametrize("module", ["torch.neuron", "torch.neuron.memory"])
def test_only_torchneurons_names_are_on_the_device_module(contract_env, module):
    """Every name TorchNeuron's module has is ours, and we add none but the listed ones (no helper module
    such as `streams` or `random`, no `get_rng_state_all` that TorchNeuron lacks)."""
    ours, theirs = _public(_ours(module)), set(MODULES[module])
    listed = {name for m, name in DIFFERENCES if m == module}
    assert theirs - ours - listed == set(), "missing"
    assert ours - theirs - listed == set(), "not TorchNeuron's"
    attributes = {n for n in vars(_ours(module)) if not n.startswith("_")}
    assert attributes == ours, "public attributes beyond __all__ (a helper module?)"


def test_the_stand_in_offers_only_torch_neuronx_names(contract_env):
    ours, theirs = _public(_ours("torch_neuronx")), set(MODULES["torch_neuronx"])
    listed = {name for m, name in DIFFERENCES if m == "torch_neuronx"}
    assert ours - theirs == set()
    assert theirs - ours == listed


@pytest.mark.parametrize(("module", "name"), [e for e in _entries() if MODULES[e[0]][e[1]]["kind"] != "module"],
                         ids="{0[0]}.{0[1]}".format)
def test_parameters_match_torchneurons(contract_env, module, name):
    if (module, name) in DIFFERENCES:
        pytest.skip(f"listed difference: {DIFFERENCES[(module, name)]}")
    entry = MODULES[module][name]
    assert _parameters(getattr(_ours(module), name)) == entry["parameters"], entry["source"]


@pytest.mark.parametrize(("module", "name"), [e for e in _entries() if MODULES[e[0]][e[1]]["kind"] != "module"],
                         ids="{0[0]}.{0[1]}".format)
def test_returns_have_torchneurons_shape(contract_env, module, name):
    entry = MODULES[module][name]
    if (module, name) in DIFFERENCES:
        pytest.skip(f"listed difference: {DIFFERENCES[(module, name)]}")
    if entry["returns"] in UNRESOLVED:
        pytest.skip(f"{entry['source']}: the source does not say what it returns")
    check = SHAPES[entry["returns"]]  # a new shape in the contract needs a check here
    value = getattr(_ours(module), name)(*ARGUMENTS.get(name, lambda m: ())(module))
    if name == "device" or name == "stream" or name == "StreamContext":
        with value:
            pass
    assert check(value), f"{module}.{name} returned {value!r}, not {entry['returns']} ({entry['source']})"


def test_submodules_are_modules(contract_env):
    for module, name in _entries("module"):
        if (module, name) not in DIFFERENCES:
            assert isinstance(getattr(_ours(module), name), types.ModuleType), f"{module}.{name}"


def test_dynamo_metrics_are_torchneurons_records(contract_env):
    """`get_dynamo_metrics()` returns a list of records with exactly NeuronCompilationMetrics' fields
    (user code iterates over it); torchferry's extras are in torchferry.device.compile_metrics()."""
    import torchferry.device

    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    try:
        torch.compile(lambda t: t * 2 + 1, backend="neuron")(torch.ones(4, device="neuron"))
        records = torch.neuron.get_dynamo_metrics()
        expected = CONTRACT["records"]["get_dynamo_metrics"]
        assert isinstance(records, list) and len(records) == 1
        record = records[0]
        assert type(record).__name__ == expected["name"]
        assert {f.name: f.type for f in dataclasses.fields(record)} == expected["fields"]
        assert record.graph_node_count > 0 and record.graph_name.startswith(record.model_name)
        assert record.torch_neuronx_compile_us > 0 and record.has_collectives is False and record.timestamp
        extras = torchferry.device.compile_metrics()["graphs"]
        assert [g["graph_id"] for g in extras] == [record.graph_id] and extras[0]["cache"] in ("hit", "miss", "disabled")
    finally:
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()


def test_every_listed_difference_still_differs(contract_env):
    """Each listed difference is a name one side has and the other lacks; one that both have now is stale."""
    for (module, name), why in DIFFERENCES.items():
        assert (name in _public(_ours(module))) != (name in MODULES[module]), f"{module}.{name} no longer differs: {why}"
