"""The coverage headline leads with what a migration decides, in the vendor method's terms: how many architectures
run to completion on the device (as they are, or only with predicted host fallbacks, the top ops named), how many fail
on it, and how many have no verdict. Greedy generation's predicted argmax/isin fallbacks no longer read as "0 pass"."""

from torchferry.coverage import results
from torchferry.report.coverage import Category, Row


def row(arch: str, mode: str, category: Category, **fields) -> Row:
    return Row(arch=arch, mode=mode, category=category, reason="", device="neuron", ref="cpu", **fields)


FALLBACK = {"aten::argmax": 8, "aten::isin.Tensor_Tensor": 1}
ROWS = [
    *(r for a in ("llama", "gpt2", "mistral") for r in (
        row(a, "forward", Category.PASS), row(a, "generate", Category.FAIL_FALLBACK, fallback_ops=FALLBACK))),
    row("bloom", "forward", Category.FAIL_FALLBACK, fallback_ops={"aten::baddbmm": 4}),
    row("bloom", "generate", Category.FAIL_FALLBACK, fallback_ops={**FALLBACK, "aten::baddbmm": 4}),
    row("llama4", "forward", Category.ERROR), row("llama4", "generate", Category.ERROR),
    row("big", "forward", Category.HOST_LIMIT), row("big", "generate", Category.PASS),
    row("mamba", "forward", Category.SKIPPED), row("mamba", "generate", Category.SKIPPED),
]


def test_the_first_line_is_what_runs_on_the_device_for_all_modes_with_the_top_fallback_ops():
    lines = results.headline(results.summarise(ROWS, ["forward", "generate"]), "neuron", None, {"torch": "2.13.0"})
    assert lines[0] == ("causal-lm on neuron (eager), all modes (forward, generate): 4 of 5 architectures run to completion "
                        "on the device (0 work as they are; 4 only with predicted host fallbacks: aten::argmax in 4, "
                        "aten::isin.Tensor_Tensor in 4, aten::baddbmm in 1), 1 fail on the device; no verdict: "
                        "1 host-limited, 1 skipped")
    assert lines[1].startswith("causal-lm on neuron (eager), forward: 4 of 5 architectures run to completion on the "
                               "device (3 work as they are; 1 only with predicted host fallbacks: aten::baddbmm in 1)")
    assert lines[2].startswith("causal-lm on neuron (eager), generate: 5 of 6 architectures run to completion")
    assert lines[-1] == "versions: torch 2.13.0"


def test_the_outcomes_are_in_the_summary_of_every_mode_and_all_modes():
    suite = results.summarise(ROWS, ["forward", "generate"])["suites"]["causal-lm"]
    assert suite["all_modes"]["outcomes"] == {"works": 0, "host_fallbacks": 4, "recompiles": 0, "fails": 1,
                                              "host_limited": 1, "skipped": 1}
    assert suite["modes"]["forward"]["outcomes"]["works"] == 3
    assert suite["all_modes"]["host_fallback_ops"][0] == {"op": "aten::argmax", "architectures": 4}


def test_a_recompiling_architecture_is_said_only_under_compile():
    rows = [row("llama", "forward", Category.FAIL_RECOMPILE), row("gpt2", "forward", Category.PASS)]
    line = results.headline(results.summarise(rows, ["forward"]), "neuron", "neuron", {})[0]
    assert line == ("causal-lm on neuron (compile=neuron), forward: 2 of 2 architectures run to completion on the device "
                    "(1 work as they are; 0 only with predicted host fallbacks; 1 compiling a graph per input shape), "
                    "0 fail on the device; no verdict: 0 host-limited, 0 skipped")
