"""Reversible exit: reloading in a torchferry-free process, and flagging device-tagged checkpoints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkcfg import make_config

from torchferry.check import exit as exit_mod

pytestmark = pytest.mark.slow  # whole ferry check runs: worker processes each import torch and build the workload

MLP = Path(exit_mod.__file__).parents[1] / "workloads" / "mlp.py"


@pytest.fixture
def mlp_target(tmp_path):
    """An MLP, its eval batch and outputs as the target worker leaves them in <out>/exit."""
    from torchferry.workloads.mlp import build

    torch.manual_seed(0)
    built = build()
    exit_dir = tmp_path / "exit"
    exit_dir.mkdir()
    batch = built["batch"]("cpu", 7)
    torch.save(batch, exit_dir / "eval_batch.pt")
    with torch.no_grad():
        outputs = {"output": built["model"](batch["x"])}
    arch = {"kind": "file", "path": str(MLP), "attr": "build", "options": {}}
    return tmp_path, exit_dir, built["model"], arch, outputs, make_config(tmp_path, "--mode", "forward", "--timeout", "120")


def _tag_storages_as(tag: str):
    """Make torch.save record ``tag`` as every storage's location, as a save from a real device would."""
    state = {"on": True}
    torch.serialization.register_package(1, lambda storage: tag if state["on"] else None, lambda storage, location: None)
    return state


def test_device_tagged_storages_are_flagged_with_the_fix(mlp_target):
    out, exit_dir, model, arch, outputs, cfg = mlp_target
    path = exit_dir / "state_dict.pt"
    tagging = _tag_storages_as("fakedev:0")
    try:
        torch.save(model.state_dict(), path)
    finally:
        tagging["on"] = False
    saved = {"torch.save state dict": {"path": str(path)}}
    result = exit_mod.check(out, exit_mod.SavedFormats(saved=saved, architecture=arch), outputs, cfg)
    fmt = result.formats[0]
    assert fmt.location_tags == ["fakedev:0"]
    assert fmt.loads_plain is False and fmt.needs_map_location is True
    assert "map_location" in fmt.fix and ".cpu()" in fmt.fix
    assert fmt.parity is not None and fmt.parity.passed  # loaded with map_location, the weights are intact
    assert result.status == "conditions" and result.torchferry_absent is True


def test_plain_cpu_checkpoint_and_safetensors_reload_with_parity(mlp_target):
    from safetensors.torch import save_model

    out, exit_dir, model, arch, outputs, cfg = mlp_target
    torch.save(model.state_dict(), exit_dir / "state_dict.pt")
    save_model(model, str(exit_dir / "model.safetensors"))
    saved = {"torch.save state dict": {"path": str(exit_dir / "state_dict.pt")},
             "safetensors": {"path": str(exit_dir / "model.safetensors")}}
    result = exit_mod.check(out, exit_mod.SavedFormats(saved=saved, architecture=arch), outputs, cfg)
    assert result.status == "pass"
    assert all(f.loads_plain and f.parity.passed and f.location_tags in ([], ["cpu"]) for f in result.formats)


def test_changed_weights_lose_exit_parity(mlp_target):
    out, exit_dir, model, arch, outputs, cfg = mlp_target
    torch.save(model.state_dict(), exit_dir / "state_dict.pt")
    saved = exit_mod.SavedFormats(saved={"torch.save state dict": {"path": str(exit_dir / "state_dict.pt")}},
                                  architecture=arch)
    result = exit_mod.check(out, saved, {"output": outputs["output"] + 1.0}, cfg)
    assert result.status == "fail" and not result.formats[0].parity.passed


def test_loader_environment_keeps_torchferry_out():
    code = ("import sys, torch, transformers, safetensors.torch; "
            "print('torchferry' in {m.split('.')[0] for m in sys.modules})")
    proc = subprocess.run([sys.executable, "-c", code], env=exit_mod.loader_env(), capture_output=True, text=True,
                          timeout=120, cwd="/")
    assert proc.stdout.strip() == "False", proc.stderr


def test_save_pretrained_of_a_non_transformers_class_reloads_with_its_own_loader(tmp_path, monkeypatch):
    from torchferry.check import exit_loader

    (tmp_path / "ferry_own_loader.py").write_text(
        "import torch\n\n"
        "class Own(torch.nn.Linear):\n"
        "    @classmethod\n"
        "    def from_pretrained(cls, path):\n"
        "        model = cls(2, 2)\n"
        "        model.loaded_from = path\n"
        "        return model\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    record = {}
    model, inputs = exit_loader.load_pretrained(
        {"kind": "module", "pretrained": {"module": "ferry_own_loader", "class": "Own"}}, "saved-dir", record)
    assert model.loaded_from == "saved-dir" and record["loads_plain"] is True and inputs is None


def test_a_loader_that_needs_the_base_model_is_skipped_with_the_reason():
    pytest.importorskip("peft", reason="peft is not installed (pip install -e '.[test]' installs it)")
    from torchferry.check import exit_loader

    record = {}
    model, _ = exit_loader.load_pretrained({"kind": "transformers", "pretrained": {"module": "peft", "class": "PeftModel"}},
                                           "saved-dir", record)
    assert model is None and "PeftModel.from_pretrained needs model, model_id" in record["skipped"]

