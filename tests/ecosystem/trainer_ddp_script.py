"""Trains a tiny Llama with `Trainer` (global batch 4); writes what ran where to OUT/result-RANK.json.

Run as `python trainer_ddp_script.py OUT` (one process) or under
`torchrun --nproc-per-node 2` with TORCHFERRY_DEVICE=neuron. The script is the user's, unchanged:
no `set_device`, no `ACCELERATE_BYPASS_DEVICE_MAP`. Each rank's device is `neuron:LOCAL_RANK`
because `init_process_group("neuron")` selects it, as TorchNeuron's backend does
(docs/device/ecosystem.md, "Trainer and accelerate under torchrun").
"""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist
from hf_tiny import tiny_llama, token_batches
from transformers import Trainer, TrainingArguments

world = int(os.environ.get("WORLD_SIZE", "1"))
args = TrainingArguments(output_dir=sys.argv[1], max_steps=3, per_device_train_batch_size=4 // world,
                         learning_rate=1e-2, report_to=[], save_strategy="no", logging_steps=1,
                         disable_tqdm=True)
trainer = Trainer(model=tiny_llama(), args=args, train_dataset=token_batches(16))
trainer.train()
wrapped = trainer.model_wrapped
rank = dist.get_rank() if dist.is_initialized() else 0
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
Path(sys.argv[1], f"result-{rank}.json").write_text(json.dumps({
    "rank": rank,
    "bypass_device_map": os.environ.get("ACCELERATE_BYPASS_DEVICE_MAP"),
    "distributed_type": trainer.accelerator.state.distributed_type.value,
    "backend": dist.get_backend() if dist.is_initialized() else None,
    "wrapper": type(wrapped).__name__,
    "device_ids": getattr(wrapped, "device_ids", None),
    "param_devices": sorted({str(p.device) for p in wrapped.parameters()}),
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
}))
