"""What TorchNeuron's `neuron` process group refuses that gloo accepts: the profile's `pg_*` rules.

The built-in device's process group runs every collective over gloo (`distributed.py`), which takes
any point-to-point message, any all_to_all split and a barrier on any group. TorchNeuron's
`ProcessGroupNeuron` (`torch_neuronx/distributed/backend.py`, snapshot named in
docs/device/fidelity.md) does not: it has no send/recv, accepts all_to_all split sizes only when
they are absent or all ones, runs its collectives through XLA operations whose `can_handle` refuses
some group sizes, reduce ops and empty tensors (`python_ops/xla_ops/*.py`), and implements
`barrier` on the default group only. A pipeline-parallel or mixture-of-experts script that
rehearses clean here must not fail on Trainium for one of these, so the group checks them before
it starts the gloo collective, with TorchNeuron's error type and message, then the fix.

TorchNeuron sets `TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1` when imported
(`torch_neuronx/__init__.py`), so a collective no implementation can handle raises its "CPU
fallback disabled" RuntimeError, the message reproduced here (`python_ops/base.py`,
`Operation.__call__`). Each rule is a profile [rules] entry (profile.RULES) and can be switched off.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from torchferry.device import target

_DOCS = "docs/device/distributed.md"
# python_ops/xla_ops/reduce_functions.py SUPPORTED_REDUCE_OPS; PREMUL_SUM is applied as SUM first
# (distributed/utils.py parse_and_update_inputs).
_REDUCE_OPS = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "MIN": dist.ReduceOp.MIN,
               "MAX": dist.ReduceOp.MAX}
_ALL_TO_ALL_SIZES = "4, 8, 16, or multiples of 32"


def _profile() -> str:
    from torchferry.device import _runtime

    return _runtime.profile().name


def _tail(rule: str, source: str, fix: str) -> str:
    return (f" (the `neuron` process group, as on '{_profile()}': {source}). Next step: {fix}; a device profile "
            f"with `{rule} = false` lets it through ({_DOCS}).")


def _unhandled(op_name: str, details: str, rule: str, source: str, fix: str) -> RuntimeError:
    """TorchNeuron's error for a collective none of its implementations can handle (the device's text for it)."""
    message = target._core()._fallback_disabled_message(op_name, False, "unknown", details)
    return RuntimeError(message + _tail(rule, source, fix))


def check_point_to_point(collective: str) -> None:
    """send/recv: `ProcessGroupNeuron` defines neither, so PyTorch finds no backend for the tensor's device."""
    if not target.rule_on("pg_point_to_point"):
        return
    raise RuntimeError(f"No backend type associated with device type neuron ({collective})" + _tail(
        "pg_point_to_point",
        "torch_neuronx/distributed/backend.py: ProcessGroupNeuron has no send/recv; its CI skips these tests as "
        "'Temporarily not supported send_recv', tests/pytorch_tests/specs/common_c10d_spec.json",
        "exchange the tensors with a collective the group implements (broadcast, all_gather_into_tensor, or "
        "all_to_all_single without split sizes on 4, 8, 16 or 32k ranks); TorchNeuron announces pipeline "
        "parallelism as 'available soon'"))


def check_unimplemented(method: str) -> None:
    """recv_anysource and monitored_barrier: `ProcessGroupNeuron` raises a bare NotImplementedError."""
    rule = "pg_point_to_point" if method == "recv_anysource" else "pg_default_group_barrier"
    if not target.rule_on(rule):
        return
    fix = ("receive from a named rank with a collective" if method == "recv_anysource"
           else "call dist.barrier() on the default group")
    raise NotImplementedError(f"{method} is not implemented by TorchNeuron's process group" + _tail(
        rule, f"torch_neuronx/distributed/backend.py: ProcessGroupNeuron.{method} raises NotImplementedError", fix))


def check_barrier(group: dist.ProcessGroup, group_size: int) -> None:
    """barrier on a group smaller than the world: TorchNeuron's barrier is an NRT barrier of every rank."""
    if not target.rule_on("pg_default_group_barrier") or group_size == dist.get_world_size():
        return
    raise NotImplementedError(
        f"Barrier is implemented only for default group, called barrier on {group}" + _tail(
            "pg_default_group_barrier",
            "torch_neuronx/distributed/backend.py, ProcessGroupNeuron.barrier; its CI: 'Barrier is only implemented "
            "for default group, while not supported on pg by dist.new_group()', specs/common_c10d_spec.json",
            "call dist.barrier() without a group (every rank), or synchronise the subgroup with a small "
            "all_reduce on it"))


def check_reduce_op(op_name: str, op: dist.ReduceOp) -> None:
    """A reduce op TorchNeuron's XLA collectives do not implement (PRODUCT, BAND, BOR, BXOR)."""
    if not target.rule_on("pg_reduce_ops") or op == dist.ReduceOp.PREMUL_SUM:
        return
    if any(op == supported for supported in _REDUCE_OPS.values()):
        return
    name = getattr(op, "op", op).name  # a ReduceOp holds its RedOpType in `op`
    raise _unhandled(
        op_name, f"unsupported reduce operation '{name}', supported ops: {sorted(_REDUCE_OPS)}", "pg_reduce_ops",
        "torch_neuronx/python_ops/xla_ops/reduce_functions.py SUPPORTED_REDUCE_OPS, read by the can_handle of "
        "all_reduce_xla.py and reduce_scatter_xla.py",
        "reduce with SUM, AVG, MIN or MAX (a product of positive values: exp of a SUM of logs)")


def check_real(op_name: str, tensors: Sequence[torch.Tensor]) -> None:
    """Complex tensors reaching the group (DDP's reducer and the functional collectives pass them as they are;
    `dist.all_reduce` and its kin pass `view_as_real` views): TorchNeuron's collective fails to compile."""
    if not target.rule_on("pg_complex_tensors"):
        return
    complex_dtypes = sorted({str(t.dtype) for t in tensors if t.is_complex()})
    if not complex_dtypes:
        return
    raise RuntimeError(
        f"Compilation error occurred on Neuron for operation={op_name} - complex params not supported "
        f"({', '.join(complex_dtypes)})" + _tail(
            "pg_complex_tensors", "its CI: 'Compilation error occurred on Neuron for operation=all_reduce - complex "
            "params not supported', specs/ddp_spec.json; 'NEFF compilation failed with return code 70 for "
            "complex64', specs/dtensor_spec.json",
            "keep complex parameters and buffers out of the collectives (torch.view_as_real(p) as the parameter, "
            "or real and imaginary parts as two real parameters)"))


def check_not_empty(op_name: str, tensors: Sequence[torch.Tensor], *, first_dim: bool = False) -> None:
    """Empty tensors, which TorchNeuron's XLA collectives refuse (all_gather: a zero first dimension)."""
    if not target.rule_on("pg_empty_tensors"):
        return
    if first_dim:
        empty = [(i, tuple(t.shape)) for i, t in enumerate(tensors) if t.dim() > 0 and t.size(0) == 0]
        details = "tensors cannot have zero size in dimension 0, found: " + ", ".join(
            f"tensor[{i}]: {shape}" for i, shape in empty)
    else:
        empty = [(i, tuple(t.shape)) for i, t in enumerate(tensors) if t.numel() == 0]
        details = f"tensors cannot be empty, found empty tensors at indices: {[i for i, _ in empty]}"
    if not empty:
        return
    raise _unhandled(
        op_name, details, "pg_empty_tensors",
        "the can_handle of torch_neuronx/python_ops/xla_ops/all_reduce_xla.py, reduce_scatter_xla.py, "
        "all_gather_xla.py, and distributed/utils.py _validate_no_zero_dim0; its CI: 'ReduceScatter with empty "
        "tensors not supported', specs/dtensor_spec.json",
        "skip the collective when there is nothing to send (the coalesced collectives skip empty tensors "
        "themselves), or pad to at least one element")


def check_all_gather_list(tensors: Sequence[torch.Tensor]) -> None:
    """all_gather (list form) validates every input and output first (`_validate_no_zero_dim0`, a ValueError)."""
    if not target.rule_on("pg_empty_tensors"):
        return
    empty = [(i, tuple(t.shape)) for i, t in enumerate(tensors) if t.dim() > 0 and t.size(0) == 0]
    if empty:
        raise ValueError("tensors cannot have zero size in dimension 0, found: " + ", ".join(
            f"tensor[{i}]: {shape}" for i, shape in empty) + _tail(
            "pg_empty_tensors", "torch_neuronx/distributed/utils.py _validate_no_zero_dim0, called by "
            "ProcessGroupNeuron.allgather", "skip the all_gather when the tensors are empty, or pad them"))


def check_all_to_all_splits(output_splits: Sequence[int] | None, input_splits: Sequence[int] | None,
                            group_size: int) -> None:
    """all_to_all_single's split sizes: none, or all ones (`ProcessGroupNeuron.alltoall_base`)."""
    if not target.rule_on("pg_all_to_all"):
        return
    for name, splits in (("output", output_splits), ("input", input_splits)):
        if splits is None or len(splits) == 0 or all(size == 1 for size in splits):
            continue
        if len(splits) != group_size:
            message = (f"alltoall_base: {name}_split_sizes length ({len(splits)}) must match group_size "
                       f"({group_size})")
        else:
            message = f"alltoall_base: Only even split sizes are supported. Got {name}_split_sizes: {list(splits)}"
        raise NotImplementedError(message + _tail(
            "pg_all_to_all", "torch_neuronx/distributed/backend.py, ProcessGroupNeuron.alltoall_base: split sizes "
            "must be None or all ones; its CI: specs/common_c10d_spec.json (test_all_to_all_single)",
            "pass no split sizes (every rank sends input.shape[0] // group_size rows to each rank): pad each "
            "rank's chunk to the largest, as a mixture-of-experts layer pads its expert capacity"))


def check_all_to_all(group_ranks: Sequence[int], world_size: int, inputs: Sequence[torch.Tensor]) -> None:
    """all_to_all (and all_to_all_single, which TorchNeuron splits into it): the group sizes and tensors
    `AllToAllXlaOp.can_handle` accepts (`python_ops/xla_ops/all_to_all_xla.py`)."""
    if not target.rule_on("pg_all_to_all") or all(t.numel() == 0 for t in inputs):
        return  # TorchNeuron returns at once when every input is empty
    size = len(group_ranks)
    rule, fix = "pg_all_to_all", (
        f"run all_to_all on a group of {_ALL_TO_ALL_SIZES} ranks whose first rank is a multiple of its size, "
        "with one chunk per rank, all of one shape and dtype; on fewer ranks, all_gather_into_tensor and "
        "keeping your own rows gives the same result")
    source = "torch_neuronx/python_ops/xla_ops/all_to_all_xla.py, AllToAllXlaOp.can_handle"
    if world_size % size != 0:
        raise ValueError(f"Cannot create global_replica_group when world_size:{world_size} is not divisible by "
                         f"group_size: {size}." + _tail(rule, "torch_neuronx/distributed/backend.py alltoall", fix))
    if size not in (4, 8, 16) and size % 32 != 0:
        details = f"unsupported world size {size}, supported sizes: {_ALL_TO_ALL_SIZES}"
    else:
        unused = [r for r in range(world_size) if r not in group_ranks]
        groups = [list(group_ranks)] + [unused[j:j + size] for j in range(0, world_size - size, size)]
        starts = [(i, g) for i, g in enumerate(groups) if g[0] % size != 0]
        shapes = {tuple(t.shape) for t in inputs}
        dtypes = {t.dtype for t in inputs}
        if starts:
            details = (f"replica group start ranks must be multiples of world size ({size}), found: "
                       + ", ".join(f"group[{i}] {g} starts at rank {g[0]}" for i, g in starts))
        elif len(inputs) != size:
            details = f"number of input tensors ({len(inputs)}) must equal world size ({size})"
        elif any(t.numel() == 0 for t in inputs):
            details = ("input tensors cannot be empty, found empty tensors at indices: "
                       f"{[i for i, t in enumerate(inputs) if t.numel() == 0]}")
        elif len(dtypes) > 1:
            details = f"all input tensors must have same dtype, found {sorted(map(str, dtypes))}"
        elif len(shapes) > 1:
            details = f"all input tensors must have same shape, found {sorted(shapes)}"
        else:
            return
    raise _unhandled("all_to_all", details, rule, source, fix)
