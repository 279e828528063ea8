"""Coverage suites, shrinking rules for formerly skipped families, and `--method torchneuron`.

Cases run in this process through the worker's own Case (the sweep's subprocess path is tested
in test_coverage.py), at the suites' smallest sizes, on the built-in device against the CPU.
"""

import argparse
import json
import warnings

import pytest

from torchferry.coverage import configs, methods, suites
from torchferry.errors import UsageError
from caserun import RUNS_CORRECTLY, run_case

pytestmark = pytest.mark.slow  # coverage sweeps: builds and runs Hugging Face architectures, in worker processes


@pytest.mark.parametrize("suite,arch", [
    ("seq2seq", "t5"), ("seq2seq", "bart"),
    ("encoder", "bert"), ("encoder", "roberta:seq-cls"),
    ("vision", "vit"), ("vision", "convnext"),
    ("diffusers", "unet2d-condition"), ("diffusers", "sd3"),
])
@pytest.mark.timeout(120)
def test_suite_architecture_runs_forward_and_train_correctly(suite, arch):
    rows = run_case(suite, arch, ["forward", "train"])
    for mode, row in rows.items():
        assert row["category"] in RUNS_CORRECTLY, (mode, row["reason"], row.get("traceback"))
        assert row["suite"] == suite and row["checks"] >= 1 and row["failed_checks"] == 0
    assert rows["train"]["checks"] > 2  # the loss and every parameter's gradient
    assert rows["forward"]["model_class"] == suites.get(suite).architectures()[arch]


@pytest.mark.timeout(120)
def test_seq2seq_generates_greedily_from_the_encoder_input():
    row = run_case("seq2seq", "t5", ["generate"])["generate"]
    assert row["category"] in RUNS_CORRECTLY, row["reason"]
    assert row["checks"] >= 1 and row["cache"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("golden_differs", [False, True])
def test_generate_judges_tokens_by_the_one_rule_a_mismatch_fails_unless_float64_disagrees_too(monkeypatch,
                                                                                                golden_differs):
    """The harness's token rule (harness.parity.compare_tokens), as `ferry check` applies it: the target's last token
    changed fails the row, unless the float64 run also picks another token than the reference (a near tie)."""
    from torchferry.coverage.worker import Case

    def last_token_changed(method):
        def run(self, case):
            capture = method(self, case)
            if capture is not None:
                capture.outputs[0].sequences[0, -1] += 1
            return capture
        return run

    monkeypatch.setattr(Case, "on_target", last_token_changed(Case.on_target))
    if golden_differs:
        monkeypatch.setattr(Case, "golden", last_token_changed(Case.golden))
    row = run_case("causal-lm", "gpt2", ["generate"])["generate"]
    last = len(row["tokens"]["ref"][0]) - 1
    assert row["tokens"]["first_mismatch"] == last and row["tokens"]["near_tie"] is golden_differs
    assert (row["category"] in RUNS_CORRECTLY) is golden_differs, row["reason"]


def test_suites_declare_their_architectures_and_modes():
    from torchferry.harness.modes import Mode

    assert suites.get("encoder").architectures()["bert:seq-cls"] == "BertForSequenceClassification"
    assert "vit" in suites.get("vision").architectures() and "t5" in suites.get("seq2seq").architectures()
    assert {"unet2d", "unet2d-condition", "dit", "sd3", "flux"} <= set(suites.get("diffusers").architectures())
    assert Mode.GENERATE not in suites.get("vision").modes and Mode.GENERATE in suites.get("seq2seq").modes
    assert suites.parse("all") == suites.NAMES and suites.parse("vision, encoder") == ("vision", "encoder")
    with pytest.raises(UsageError, match="unknown suite 'audio'.*valid: causal-lm"):
        suites.parse("audio")


def test_a_suite_refuses_a_model_fed_something_else():
    from torchferry.coverage.job import CoverageJob
    from torchferry.coverage.worker import Case, Skip

    case = Case(CoverageJob(arch="imagegpt", spec="imagegpt", suite="vision", modes=("forward",), target="cpu",
                            ref="cpu", seed=0))
    case.setup()
    with pytest.raises(Skip, match="main input is 'input_ids'; the vision suite feeds 'pixel_values'"):
        case.build()


# -- shrinking rules for families the generic shrink could not build -----------------------------

@pytest.mark.parametrize("arch", ["deepseek_v32", "glm_moe_dsa"])
@pytest.mark.timeout(60)
def test_sparse_attention_mla_families_shrink_to_a_consistent_config(arch):
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    cfg = configs.shrink(CONFIG_MAPPING[arch]())
    assert cfg.num_key_value_heads == cfg.num_attention_heads  # MLA expands its latent to every head
    assert cfg.qk_head_dim == cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    assert cfg.index_topk < 16 and cfg.index_n_heads == configs.HEADS
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        logits = model(torch.randint(4, cfg.vocab_size, (1, 12))).logits
    assert logits.shape == (1, 12, cfg.vocab_size) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("arch", ["jamba", "bamba", "mamba2", "llama4_text", "nemotron"])
@pytest.mark.timeout(60)
def test_formerly_skipped_families_build_tiny_and_run_on_the_reference(arch):
    from torchferry.coverage.job import CoverageJob
    from torchferry.coverage.worker import Case

    case = Case(CoverageJob(arch=arch, spec=arch, suite="causal-lm", modes=("forward",), target="cpu", ref="cpu",
                            seed=0))
    case.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case.build()  # raises Skip with every variant's error when none builds and runs a forward
    assert case.variant == "tiny" and case.row["params"] < 10_000_000


def test_hybrid_and_per_layer_rules_keep_what_each_family_needs():
    from transformers import CONFIG_MAPPING

    jamba = configs.shrink(CONFIG_MAPPING["jamba"]())
    assert jamba.attn_layer_period <= jamba.num_hidden_layers and jamba.attn_layer_offset < jamba.num_hidden_layers
    bamba = configs.shrink(CONFIG_MAPPING["bamba"]())  # an attention layer for the hybrid cache, Mamba-2 widths consistent
    assert bamba.attn_layer_indices == [bamba.num_hidden_layers - 1]
    assert bamba.mamba_n_heads * bamba.mamba_d_head == bamba.mamba_expand * bamba.hidden_size
    llama4 = configs.shrink(CONFIG_MAPPING["llama4_text"]())  # moe_layers is an index list, no_rope_layers per-layer flags
    assert llama4.num_hidden_layers == len(llama4.layer_types) == len(llama4.no_rope_layers) <= 3
    assert set(llama4.no_rope_layers) == {0, 1} and max(llama4.moe_layers) < llama4.num_hidden_layers
    assert configs.shrink(CONFIG_MAPPING["mt5"]()).dense_act_fn == "gelu_new"  # a name, not a per-layer pattern


def test_vision_rules_shrink_stages_and_keep_their_ratios():
    from transformers import CONFIG_MAPPING

    swin = configs.shrink(CONFIG_MAPPING["swin"](), images=True)
    assert list(swin.depths) == [1, 1, 1, 1] and swin.window_size == 2
    assert swin.image_size // swin.patch_size // 2 ** (len(swin.depths) - 1) == swin.window_size  # one window at the end
    assert all(swin.embed_dim * 2**i % h == 0 for i, h in enumerate(swin.num_heads))
    convnext = configs.shrink(CONFIG_MAPPING["convnext"](), images=True)
    assert list(convnext.hidden_sizes) == [16, 32, 64, 128]
    assert configs.shrink(CONFIG_MAPPING["vit"](), images=True).image_size == configs.IMAGE_SIZE
    assert configs.shrink(CONFIG_MAPPING["cvt"](), images=True).drop_path_rate == [0.0, 0.0, 0.0]


# -- --method torchneuron ------------------------------------------------------------------------

def _config(tmp_path, *argv: str):
    from torchferry.coverage.command import add_arguments
    from torchferry.coverage.config import CoverageConfig

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return CoverageConfig.build(parser.parse_args([*argv, "--target", "neuron", "-o", str(tmp_path / "out")]), tmp_path)


def test_method_torchneuron_resolves_to_the_vendors_settings(tmp_path):
    cfg = _config(tmp_path, "llama", "--method", "torchneuron")
    assert cfg.method == "torchneuron" and [str(m) for m in cfg.modes] == ["train"]
    assert cfg.settings["method"] == "torchneuron" and cfg.to_dict()["method"] == "torchneuron"
    job = cfg.jobs_list()[0]
    assert job.method == "torchneuron" and job.modes == ("train",) and job.suite == "causal-lm"
    m = methods.get("torchneuron")
    # what the vendor's run_fwd_bwd does: its "eager" setting is a no-op, so the model's default attention runs
    assert (m.batch, m.seq, m.optimizer_steps, m.attention, m.shrink_widths) == (1, 1024, 0, None, False)
    assert m.config_dtype and m.vendor_depth and m.auto_map_needs_trust and "hf_moduscope.py" in m.settings()["source"]
    (name, shallow), = configs.variants("llama", m)
    from transformers import LlamaConfig

    assert name == "vendor" and shallow.num_hidden_layers == 2
    assert (shallow.hidden_size, shallow.vocab_size) == (LlamaConfig().hidden_size, LlamaConfig().vocab_size)
    assert shallow.attention_dropout == LlamaConfig().attention_dropout  # dropout as configured
    assert _config(tmp_path / "d", "llama").method == "torchferry"


@pytest.mark.parametrize("argv,match", [
    (["--method", "torchneuron", "--modes", "forward"], "forward does not apply to --method torchneuron"),
    (["--method", "torchneuron", "--suite", "vision"], "applies to the causal-lm suite only"),
    (["--suite", "vision", "--modes", "generate"], "generate does not apply to the vision suite"),
    (["--suite", "encoder", "gpt2"], "unknown architecture 'gpt2' for the encoder suite"),
    (["--suite", "vision,encoder", "vit"], "architectures are named within one suite"),
])
def test_suite_and_method_usage_errors_name_the_valid_choices(tmp_path, argv, match):
    with pytest.raises(UsageError, match=match):
        _config(tmp_path, *argv)


@pytest.mark.timeout(120)
def test_method_torchneuron_runs_one_forward_backward_at_1024_tokens(tmp_path):
    """A tiny config file (the method keeps a config's widths): the model's own loss from labels, then backward."""
    from transformers import LlamaConfig

    spec = tmp_path / "tiny-llama.json"
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=1100)
    spec.write_text(json.dumps({**cfg.to_dict(), "model_type": "llama"}))
    cases = []
    row = run_case("causal-lm", "tiny-llama", ["train"], method="torchneuron", spec=str(spec), case_out=cases)["train"]
    assert row["category"] in RUNS_CORRECTLY, row["reason"]
    assert row["variant"] == "vendor" and row["checks"] > 1 and row["failed_checks"] == 0
    model = cases[0].model
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 32
    assert model.config._attn_implementation == "sdpa"  # the vendor's eager setting is a no-op
    inputs = cases[0].cases(cases[0].plan())[0].batch(0)  # what the reference trains on
    assert inputs["input_ids"].shape == (1, 1024) and int(inputs["input_ids"].max()) < 1024
    assert set(inputs) == {"input_ids", "attention_mask", "labels"}


def test_a_case_run_inside_another_process_leaves_its_threads_alone():
    """Only the worker process sets its intra-op threads: the autograd engine's device thread keeps the
    count it started with, so a Case that changed them would make later CPU and device backward passes
    in the same process reduce in different orders."""
    import torch

    from torchferry.coverage.job import CoverageJob
    from torchferry.coverage.worker import Case

    before = torch.get_num_threads()
    case = Case(CoverageJob(arch="llama", spec="llama", suite="causal-lm", modes=("forward",), target="cpu",
                            ref="cpu", seed=1, threads=before + 1))
    case.setup()
    assert torch.get_num_threads() == before
