"""transformers' `Trainer`, unchanged, on the built-in device: one process, and two
under `torchrun` (DDP through accelerate's `MULTI_NEURON` path)."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from hf_tiny import tiny_llama, token_batches

pytestmark = pytest.mark.slow  # Hugging Face libraries end to end on the built-in device

TORCHRUN_SCRIPT = Path(__file__).with_name("trainer_ddp_script.py")


def test_trainer_trains_on_neuron_and_the_saved_model_reloads_on_cpu(neuron, tmp_path):
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments

    model = tiny_llama()
    initial = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=2,
                             learning_rate=1e-2, report_to=[], save_strategy="no", logging_steps=1,
                             disable_tqdm=True)
    assert args.device == torch.device("neuron:0")
    trainer = Trainer(model=model, args=args, train_dataset=token_batches(8))
    neuron.clear_op_tracking()
    trainer.train()
    assert {p.device.type for p in trainer.model.parameters()} == {"neuron"}
    assert neuron.get_executed_ops().get("aten::mm", 0) > 0, "the matmuls ran on the device"
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))

    trainer.save_model(str(tmp_path / "saved"))
    reloaded = LlamaForCausalLM.from_pretrained(str(tmp_path / "saved"))
    trained = dict(trainer.model.named_parameters())
    for name, param in reloaded.named_parameters():
        assert param.device.type == "cpu"
        assert torch.equal(param.detach(), trained[name].detach().cpu()), name
    assert any(not torch.equal(trained[n].detach().cpu(), v) for n, v in initial.items()), "nothing trained"


def _results(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("result-*.json"))]


@pytest.mark.multiproc
@pytest.mark.slow
def test_unchanged_trainer_script_under_torchrun_puts_each_rank_on_its_local_core_and_matches_one_process(
        run_python, tmp_path, monkeypatch):
    # The script has no set_device line and no accelerate workaround: init_process_group("neuron") selects
    # neuron:LOCAL_RANK, as TorchNeuron's backend does (torch_neuronx/distributed/backend.py).
    monkeypatch.delenv("ACCELERATE_BYPASS_DEVICE_MAP", raising=False)
    assert "set_device(" not in TORCHRUN_SCRIPT.read_text()
    env = {"TORCHFERRY_DEVICE": "neuron"}
    # The one-process reference runs beside torchrun: separate processes and folders, and the cores torchrun's
    # launcher leaves idle while it starts its ranks do the reference's work.
    with ThreadPoolExecutor(max_workers=2) as pool:
        one = pool.submit(run_python, "", env=env, argv=[sys.executable, str(TORCHRUN_SCRIPT), str(tmp_path / "one")])
        two = pool.submit(run_python, "", env=env, timeout=420, argv=[
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(TORCHRUN_SCRIPT), str(tmp_path / "two")])
        single, two = one.result(), two.result()
    assert single.returncode == 0, single.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]

    (reference,) = _results(tmp_path / "one")
    ranks = _results(tmp_path / "two")
    assert [r["rank"] for r in ranks] == [0, 1]
    assert reference["distributed_type"] == "NO"
    for r in ranks:
        assert r["distributed_type"] == "MULTI_NEURON" and r["bypass_device_map"] is None
        assert r["wrapper"] == "DistributedDataParallel"
        assert r["param_devices"] == [f"neuron:{r['rank']}"]
        assert r["device_ids"] == [r["rank"]]
        assert r["backend"] == "neuron"
        # Trainer logs the loss averaged over ranks: the global batch's loss of one process.
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(reference["losses"]),
                                   rtol=1e-5, atol=1e-6)
