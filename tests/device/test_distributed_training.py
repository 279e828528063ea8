"""Training over the `neuron` process group matches single-device training: a tiny
transformers Llama, 10 SGD steps, with DDP, FSDP2 (`fully_shard`) and tensor parallelism
(`parallelize_module`, colwise/rowwise), on 2 and 4 ranks; FSDP2 mixed precision runs;
DCP checkpoints of a 4-rank FSDP2 state reload into 2 ranks and into one CPU process."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from spawned import Spawned

STEPS = 10
GLOBAL_BATCH, SEQ = 4, 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         tie_word_embeddings=False)
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config)


def batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 128, (GLOBAL_BATCH, SEQ), generator=generator) for _ in range(STEPS)]


def train(model, device, shard_of, loss_of=lambda loss: loss, foreach=None) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, foreach=foreach)
    losses = []
    for batch in batches():
        ids = shard_of(batch).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss_of(loss.detach()).item())
    return losses, optimizer


def reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    """Single-device training on neuron:0."""
    model = tiny_llama().to("neuron:0")
    losses, _ = train(model, torch.device("neuron:0"), lambda b: b)
    return losses, {k: v.detach().cpu() for k, v in model.named_parameters()}


def _init(rank: int, world: int, port: int) -> torch.device:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import torchferry.device

    torchferry.device.enable()
    import torch.distributed as dist

    device = torch.device("neuron", rank)
    torch.neuron.set_device(device)
    dist.init_process_group("neuron", rank=rank, world_size=world)
    return device


def _mean_over_ranks(loss: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    loss = loss.clone()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    return full.detach().cpu()


def _train_mode(model, mode: str, rank: int, world: int, device: torch.device) -> list[float]:
    per_rank = GLOBAL_BATCH // world
    data_shard = lambda b: b[rank * per_rank:(rank + 1) * per_rank]  # noqa: E731
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=None)
        losses, _ = train(wrapped, device, data_shard, _mean_over_ranks)
    elif mode in ("fsdp2", "fsdp2-bf16"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if mode == "fsdp2-bf16" else MixedPrecisionPolicy()
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        losses, _ = train(model, device, data_shard, _mean_over_ranks)
    elif mode == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("neuron", (world,))
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()}
        for layer in model.model.layers:
            parallelize_module(layer, mesh, plan)
        # TP leaves norms and embeddings plain tensors; foreach cannot mix them with DTensors.
        losses, _ = train(model, device, lambda b: b, foreach=False)
    else:
        raise ValueError(mode)
    return losses


def _train_worker(rank: int, world: int, port: int, modes: list[str], out: str) -> None:
    """Each mode in turn on a fresh model, in one process group (tests/device/spawned.py); rank 0 saves each
    mode's result as soon as it has it, with the single-device reference it computed once."""
    import torch.distributed as dist

    device = _init(rank, world, port)
    if rank == 0:
        ref_losses, ref_params = reference()
    for mode in modes:
        if mode == "dcp-save":  # the checkpoint test's 4-rank save, in these processes rather than 4 more
            result = {**_checkpoint(rank, world, device, "save", f"{out}/ckpt"), "checkpoint": f"{out}/ckpt"}
        else:
            model = tiny_llama().to(device)
            losses = _train_mode(model, mode, rank, world, device)
            # full_tensor() is a collective: every rank gathers, rank 0 saves.
            result = {"losses": losses, "params": {k: _full(v) for k, v in model.named_parameters()}}
        if rank == 0:
            torch.save({**result, "ref_losses": ref_losses, "ref_params": ref_params}, f"{out}/{mode}.pt")
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()


MODES = {2: ["ddp", "fsdp2", "tp", "fsdp2-bf16"], 4: ["ddp", "fsdp2", "tp", "dcp-save"]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each world size's modes in one set of processes (tests/device/spawned.py): each mode starts from a fresh model
    as in a run of its own, and the start-up, most of a run's time, is paid once per world size, not once per mode."""
    spawned = Spawned(tmp_path_factory)

    def result(world: int, mode: str) -> dict:
        def start(out) -> None:
            mp.spawn(_train_worker, args=(world, free_port(), MODES[world], str(out)), nprocs=world)

        return spawned.result(f"train-{world}", mode, start)

    return result


def _assert_matches_single_device(result: dict) -> None:
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(result["ref_losses"]),
                               rtol=1e-5, atol=1e-5)
    assert result["params"].keys() == result["ref_params"].keys()
    for name, ref in result["ref_params"].items():
        torch.testing.assert_close(result["params"][name], ref, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.multiproc
@pytest.mark.parametrize("mode", ["ddp", "fsdp2", "tp"])
def test_two_rank_training_matches_single_device(trained, mode):
    _assert_matches_single_device(trained(2, mode))


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp2", "tp"])
def test_four_rank_training_matches_single_device(trained, mode):
    _assert_matches_single_device(trained(4, mode))


@pytest.mark.multiproc
def test_fsdp2_bfloat16_params_float32_reduce_trains(trained):
    result = trained(2, "fsdp2-bf16")
    # bfloat16 compute: the float32 single-device losses within bfloat16 precision.
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(result["ref_losses"]),
                               rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- checkpoints

def _fsdp2_model(device):
    from torch.distributed.fsdp import fully_shard

    model = tiny_llama().to(device)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def _checkpoint(rank: int, world: int, device: torch.device, action: str, checkpoint: str) -> dict:
    """FSDP2 over ``world`` ranks: train 3 steps and save a DCP checkpoint, or load one; the full parameters and
    momenta after it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model = _fsdp2_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    if action == "save":
        per_rank = GLOBAL_BATCH // world
        for batch in batches()[:3]:
            ids = batch[rank * per_rank:(rank + 1) * per_rank].to(device)
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint)
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=checkpoint)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    params = {k: _full(v) for k, v in model.named_parameters()}
    momenta = {k: _full(optimizer.state[p]["momentum_buffer"]) for k, p in model.named_parameters()}
    return {"params": params, "momenta": momenta}


def _load_worker(rank: int, world: int, port: int, checkpoint: str, out: str) -> None:
    import torch.distributed as dist

    loaded = _checkpoint(rank, world, _init(rank, world, port), "load", checkpoint)
    if rank == 0:
        torch.save(loaded, f"{out}/load-{world}.pt")
    dist.barrier()  # before leaving: docs/device/distributed.md, Limits (gloo's exit abort)
    dist.destroy_process_group()


@pytest.mark.multiproc
@pytest.mark.slow
def test_dcp_fsdp2_checkpoint_reshards_from_four_ranks_to_two_and_to_one_cpu_process(trained, tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    saved = trained(4, "dcp-save")  # saved by the 4-rank processes of the training tests, after their modes
    checkpoint = Path(saved["checkpoint"])
    mp.spawn(_load_worker, args=(2, free_port(), str(checkpoint), str(tmp_path)), nprocs=2)
    loaded = torch.load(tmp_path / "load-2.pt")
    for kind in ("params", "momenta"):
        for name, value in saved[kind].items():
            assert torch.equal(loaded[kind][name], value), f"{kind} {name} differs after 4 -> 2 ranks"

    # One CPU process, no process group: DCP reshards into plain CPU tensors.
    model = tiny_llama()
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=checkpoint)
    model.load_state_dict(state["model"])
    for name, param in model.named_parameters():
        assert param.device.type == "cpu" and torch.equal(param.detach(), saved["params"][name]), name
    dcp_to_torch_save(checkpoint, tmp_path / "full.pt")
    optim = torch.load(tmp_path / "full.pt")["optim"]["state"]
    for name, momentum in saved["momenta"].items():
        assert torch.equal(optim[name]["momentum_buffer"], momentum), name
