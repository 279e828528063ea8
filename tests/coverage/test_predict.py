"""What coverage rows predict for the target: host fallbacks with their share, eager signatures,
host syncs, and under --compile the graphs, graph breaks with their reasons, and fullgraph."""

import pytest

from torchferry.harness.window import dynamo_graphs
from torchferry.report.coverage import Category, Row

pytestmark = pytest.mark.slow  # coverage sweeps: builds and runs Hugging Face architectures, in worker processes


def test_a_predicted_fallback_is_named_with_its_share_of_calls(planted_sweep):
    from torchferry.device.profile import expand, load_profile

    row = planted_sweep["rows"]["bloom"]
    native = load_profile("trn2").native_ops.native
    assert row["category"] == Category.FAIL_FALLBACK and row["profile"] == "trn2"
    assert row["fallback_ops"] and all(not any(n in native for n in expand(op)) for op in row["fallback_ops"])
    assert row["op_calls"] > sum(row["fallback_ops"].values())
    assert row["fallback_share"] == pytest.approx(sum(row["fallback_ops"].values()) / row["op_calls"], abs=1e-6)
    assert row["eager_signatures"] > 0 and isinstance(row["host_syncs"], dict)
    assert not any(cause.endswith("(device to host)") for cause in row["host_syncs"])  # the harness's own reads
    llama = planted_sweep["rows"]["llama"]
    assert llama["fallback_share"] == 0.0 and llama["fallback_ops"] == {} and llama["eager_signatures"] > 0
    assert planted_sweep["rows"]["ferry-planted"]["op_calls"] is None  # an error row predicts nothing


def test_known_issues_are_listed_per_row_without_changing_its_category(planted_sweep):
    """Rows carry the vendor's known issues among their ops (a prediction of its own kind); the category
    stays what the measurement says."""
    from torchferry.device.profile import load_profile

    table = {issue.op for issue in load_profile("trn2").known_issues.issues}
    llama = planted_sweep["rows"]["llama"]
    assert isinstance(llama["known_issues"], list) and llama["category"] == Category.PASS
    assert all(k["op"] in table and k["kind"] in ("fails", "slow", "accuracy") and k["source"] and k["calls"] > 0
               for k in llama["known_issues"])
    assert planted_sweep["rows"]["ferry-planted"]["known_issues"] is None  # an error row predicts nothing


def test_the_summary_ranks_the_ops_blocking_the_most_architectures(planted_sweep):
    summary = planted_sweep["doc"]["summary"]
    bloom = planted_sweep["rows"]["bloom"]["fallback_ops"]
    top = summary["blocking_ops"][0]
    assert top["name"] in bloom and top["archs"] == ["causal-lm/bloom"] and top["architectures"] == 1
    assert top["calls"] == bloom[top["name"]]
    (table,) = summary["table"]  # one suite, one mode
    assert (table["suite"], table["mode"], table["predicted"], table["fallback_free"]) == ("causal-lm", "forward", 2, 1)
    assert table["fallback_free_share"] == 50.0 and table["fullgraph_share"] is None  # eager: nothing compiled
    assert "host-fallback ops blocking the most architectures" in planted_sweep["stdout"]
    assert "predictions of the built-in device's trn2 profile" in planted_sweep["stdout"]


class _Tiny:
    """Two tiny modules on the built-in device: one with a deliberate graph break, one without."""

    @staticmethod
    def build(broken: bool):
        import torch

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)

            def forward(self, x):
                h = self.lin(x)
                if broken:
                    torch._dynamo.graph_break()  # the planted break
                return torch.tanh(h)

        return Block().to("neuron")


def _compiled_fields(broken: bool) -> dict:
    """One compiled call under the measurement window, read as the worker reads it. Dynamo's `eager` backend:
    the breaks are Dynamo's (a backend only receives the graphs), without Inductor's compile time."""
    import torch

    import torchferry.device
    from torchferry.coverage import predict
    from torchferry.harness.window import Window

    torchferry.device.enable()
    device = torch.device("neuron")
    model, x = _Tiny.build(broken), torch.randn(2, 8).to(device)
    torch._dynamo.reset()
    window = Window(device, "eager")
    torch.compile(model, backend="eager")(x)
    return predict.fields(window.read())


def test_fullgraph_failure_is_reported_with_its_break_reason_and_place():
    fields = _compiled_fields(broken=True)
    assert fields["fullgraph"] is False and fields["graph_breaks"] == 1 and fields["graphs"] == 2
    (brk,) = fields["break_reasons"]
    assert "torch._dynamo.graph_break()" in brk["reason"] and brk["count"] >= 1
    assert "test_predict.py:" in brk["where"] and brk["where"].endswith(" in forward")
    assert fields["profile"] == "trn2" and fields["op_calls"] > 0
    clean = _compiled_fields(broken=False)
    assert (clean["fullgraph"], clean["graph_breaks"], clean["graphs"], clean["break_reasons"]) == (True, 0, 1, [])


def test_a_graph_break_over_two_input_signatures_is_not_a_recompilation():
    """The compiled forward runs two sequence lengths; a break doubles the graphs of each, which is
    fullgraph's business, not a recompile (rows with a break used to be filed fail-recompile)."""
    import torch

    import torchferry.device
    from torchferry.coverage import predict

    torchferry.device.enable()
    torch._dynamo.reset()
    model = torch.compile(_Tiny.build(broken=True), backend="eager", dynamic=None)
    start = dynamo_graphs()
    model(torch.randn(2, 16, 8).to("neuron"))
    first = dynamo_graphs() - start
    model(torch.randn(2, 12, 8).to("neuron"))
    graphs = dynamo_graphs() - start
    assert (first, graphs) == (2, 4)  # two frames, each compiled static, then once more dynamic
    assert not predict.recompiles(graphs, first, signatures=2)
    assert predict.recompiles(graphs + 1, first, signatures=2)  # one graph more than the signatures explain
    assert predict.recompiles(3, 1, signatures=2) and not predict.recompiles(2, 1, signatures=2)


def test_the_cross_suite_table_and_the_break_ranking_count_fullgraph():
    from torchferry.coverage import results
    from torchferry.report import coverage_render
    from torchferry.report.coverage import CoverageReport
    from torchferry.report.meta import new_meta

    brk = {"reason": "Call to `torch._dynamo.graph_break()`", "where": "m.py:3 in forward", "count": 2}
    rows = [Row(arch="a", mode="forward", category=Category.PASS, reason="", op_calls=9, fallback_share=0.0, fullgraph=True),
            Row(arch="b", mode="forward", category=Category.FAIL_RECOMPILE, reason="", op_calls=9, fallback_share=0.0,
                fullgraph=False, graph_breaks=1, break_reasons=[brk]),
            Row(arch="t5", mode="forward", suite="seq2seq", category=Category.FAIL_FALLBACK, reason="", op_calls=9,
                fallback_ops={"aten::x": 1}, fallback_share=0.1111, fullgraph=False, graph_breaks=1, break_reasons=[brk])]
    summary = results.summarise(rows, ["forward"])
    assert [(t["suite"], t["pass_share"], t["fallback_free_share"], t["fullgraph_share"]) for t in summary["table"]] == [
        ("causal-lm", 50.0, 100.0, 50.0), ("seq2seq", 0.0, 0.0, 0.0)]
    assert summary["blocking_breaks"][0]["archs"] == ["causal-lm/b", "seq2seq/t5"]
    assert summary["blocking_ops"][0]["archs"] == ["seq2seq/t5"]
    meta = new_meta("torchferry.coverage", 3, ())
    meta.wall_s = 1.0
    doc = CoverageReport(meta=meta, environment={}, rows=rows, summary=summary,
                         config={"modes": ["forward"], "target": "neuron", "jobs": 1, "compile": "neuron"},
                         headline=results.headline(summary, "neuron", "neuron", {}))
    text = coverage_render.render_text(doc)
    assert "seq2seq    forward   0% (0/1)         0% (0/1)         0% (0/1)" in text
    assert "graph breaks blocking the most architectures" in text
    assert ("causal-lm on neuron (compile=neuron), forward: 2 of 2 architectures run to completion on the device (1 work "
            "as they are; 0 only with predicted host fallbacks; 1 compiling a graph per input shape)") in text
    html = coverage_render.render_html(doc)
    assert 'id="suites"' in html and "Graph breaks blocking the most architectures" in html
