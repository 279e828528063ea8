"""Pass rates of the conformance tier: the device beside the CPU on the same tests.

`instantiate_device_type_tests` names one test twice, e.g.
`TestOpConformanceCPU::test_out_add_cpu_float32` and
`TestOpConformancePRIVATEUSE1::test_out_add_neuron_float32`. A rate counts the tests
that both devices ran (a skip is not a run), so both rates are over the same ops,
dtypes and samples. Cases with no CPU counterpart (the CPU run skips them because it
has no second device) are counted apart. Used by conftest.py's terminal summary and by
bench/conformance.py.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import torch

OUTCOMES = ("passed", "xfailed", "failed", "skipped", "crashed")

# Test kinds of the tier, longest first so that a prefix never shadows a longer name.
KINDS = sorted(("test_compare_cpu", "test_out", "test_out_wrong_device", "test_noncontiguous_samples",
                "test_variant_consistency", "test_cpu_parity"), key=len, reverse=True)


def pair_key(nodeid: str) -> tuple[str, str, str] | None:
    """(device: "cpu" or "device", test kind such as `test_out`, the test's name with
    its device part replaced by DEVICE): the CPU's and the device's run share the key.
    None for a test that is not device-generic (the tier's own unit tests)."""
    parts = nodeid.split("::")
    if len(parts) < 3:
        return None
    cls, name = parts[-2:]
    backend = re.escape(torch._C._get_privateuse1_backend_name())
    # The PrivateUse1 class is suffixed PRIVATEUSE1, or the backend's name once a test
    # base's setUpClass has renamed it (TorchNeuron's runner tries both suffixes too).
    match = re.fullmatch(r"(.*?)(CPU|PRIVATEUSE1|" + backend.upper() + r")", cls)
    if match is None:
        return None
    generic, device = match[1], "cpu" if match[2] == "CPU" else "device"
    name = re.sub(r"^(.*)_(cpu|" + backend + r")(_|$)", r"\1_DEVICE\3", name)
    kind = next((k for k in KINDS if name.startswith(k + "_")), name)
    return device, kind, f"{generic}::{name}"


def rates(outcomes: dict[str, str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per test kind and overall ("all"): outcome counts on the CPU and on the device
    over the tests both ran, and the device-only cases."""
    per: dict[str, dict[str, tuple[str, str]]] = {"cpu": {}, "device": {}}
    for nodeid, outcome in outcomes.items():
        key = pair_key(nodeid)
        if key is not None:
            per[key[0]][key[2]] = (key[1], outcome)
    table: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for key, (kind, outcome) in per["device"].items():
        cpu = per["cpu"].get(key, (kind, "skipped"))[1]
        if outcome == "skipped":
            continue
        columns = (("cpu", cpu), ("device", outcome)) if cpu != "skipped" else (("device_only", outcome),)
        for column, value in columns:
            for group in (kind, "all"):
                table[group][column][value] += 1
                table[group][column]["total"] += 1
    return {group: {column: dict(counts) for column, counts in columns.items()}
            for group, columns in table.items()}


def format_rates(table: dict[str, dict[str, dict[str, int]]], device_name: str) -> list[str]:
    """Lines: per test kind, passed/total on the device and on the CPU, expected failures."""
    lines = []
    for group in sorted(table, key=lambda g: (g == "all", g)):
        row = table[group]
        parts = []
        for column, label in (("device", device_name), ("cpu", "cpu"), ("device_only", f"{device_name} only")):
            c = row.get(column)
            if not c:
                continue
            passed, total = c.get("passed", 0), c["total"]
            extra = ", ".join(f"{c[o]} {o}" for o in OUTCOMES[1:] if c.get(o))
            parts.append(f"{label} {passed}/{total} = {passed / total:.1%}" + (f" ({extra})" if extra else ""))
        lines.append(f"{group:<28} " + "; ".join(parts))
    return lines
