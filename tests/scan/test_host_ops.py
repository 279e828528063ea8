"""The scan's data-dependent ops are the device profile's: every data-dependent entry has a Python
spelling, every spelling is an entry, and the scan flags each spelling in a forward, citing its
entry. (test_device_agreement.py runs the same spellings on the built-in device.)"""

import pytest
import torch

from torchferry.device.profile import load_profile
from torchferry.scan.engine import analyse
from torchferry.scan.host_ops import SPELLINGS, host_ops
from torchferry.scan.rules import RULES_BY_ID
from tests.scan.spellings import EXAMPLES, STATIC


def _forward(expression: str) -> str:
    return ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x, i, mask):\n"
            f"        r = torch.ones_like(i)\n        return {expression}\n")


def _is_data_dependent(op_name: str) -> bool:
    name, _, overload = op_name.removeprefix("aten::").partition(".")
    return torch.Tag.dynamic_output_shape in getattr(getattr(torch.ops.aten, name), overload or "default").tags


def test_every_data_dependent_profile_entry_has_a_python_spelling():
    entries = [e.op for e in load_profile().host_fallback if _is_data_dependent(e.op)]
    assert entries, "the profile lists no data-dependent host fallbacks; the rule would find nothing"
    assert sorted(set(entries) - set(SPELLINGS)) == []


def test_every_spelling_is_a_profile_entry():
    # a spelling for an op the profile dropped would be dead: remove it with the entry
    assert sorted(set(SPELLINGS) - {e.op for e in load_profile().host_fallback}) == []


def test_the_rule_reads_its_ops_and_where_they_run_from_the_profile():
    profile = load_profile()
    on_host = profile.fallback_reasons()
    assert [(op.entry.op, op.on_host) for op in host_ops()] == [
        (e.op, e.op in on_host) for e in profile.host_fallback if e.op in SPELLINGS]


def test_every_spelling_has_an_example():
    assert {op for _, op in EXAMPLES} == set(SPELLINGS)


@pytest.mark.parametrize(("expression", "op"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_the_scan_flags_each_spelling_in_a_forward_citing_its_op(expression, op):
    hits, _ = analyse(_forward(expression), [RULES_BY_ID["TF020"]], fix=False)
    assert len(hits) == 1 and f"host_fallback {op}" in hits[0].hit.message


def test_one_hot_with_its_width_given_has_a_static_shape_and_is_not_flagged():
    """Its host read of the index range is the rehearsal's to count (TorchNeuron reads it whatever num_classes is);
    the scan flags only the width read from the data, which also breaks a compiled graph."""
    for expression in ("torch.nn.functional.one_hot(i, 4)", "torch.nn.functional.one_hot(i, num_classes=4)"):
        assert analyse(_forward(expression), [RULES_BY_ID["TF020"]], fix=False)[0] == []


@pytest.mark.parametrize("expression", STATIC)
def test_static_shape_spellings_are_not_flagged(expression):
    assert analyse(_forward(expression), [RULES_BY_ID["TF020"]], fix=False)[0] == []


def test_a_method_on_the_result_of_a_torch_function_is_a_method():
    # libcst names `torch.greater(a, 0).nonzero` "torch.greater.nonzero"; it is Tensor.nonzero
    hits, _ = analyse(_forward("torch.greater(x, 0).nonzero()"), [RULES_BY_ID["TF020"]], fix=False)
    assert len(hits) == 1 and "host_fallback aten::nonzero" in hits[0].hit.message
