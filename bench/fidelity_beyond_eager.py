"""Fidelity of the compile backend and the `neuron` process group against TorchNeuron's own failing-test lists.

TorchNeuron's CI lists the PyTorch tests that fail on Trainium with a reason each: 402 dynamo tests
(tests/pytorch_tests/specs/dynamo_spec.json) and the distributed suites (common_c10d, ddp, dtensor,
checkpoint, fsdp, replicate specs). This sorts those reasons into classes by their words and, for each
rule of the device profile's compile (`compiled_*`) and process-group (`pg_*`) rules, prints:

- the reason classes (and how many listed tests) the rule reproduces;
- a probe of the rule's pattern run on the built-in device: the rule must refuse it with TorchNeuron's
  message (for `compiled_float64`: compute it in float32);
- the probe's clean twins, which must keep running (all_reduce, the default-group barrier, all_to_all on
  4 ranks, an FSDP2 step, the same code written without the pattern);
- the source files the rule comes from.

Then the reason classes no rule models, with the number of tests and why. Probes of the process group
run in 2 and 4 worker processes. These are host runs of the rehearsal device: they say what it refuses,
not how Trainium performs.

    python bench/fidelity_beyond_eager.py --source /work/.mirror/parmoham-aws+test-repo-parmoham/repo
    python bench/fidelity_beyond_eager.py --source <git dir> --json beyond_eager.json

`--source` is a git dir of the snapshot (`github.com/parmoham-aws/test-repo-parmoham`, 98154b8). Exit
status 0 when every probe is refused (or changed) and every twin runs, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

FORMAT_VERSION = 1  # 1: rules, classes, probes
COMMIT = "98154b8"
SPECS = "tests/pytorch_tests/specs/"
DYNAMO = ("dynamo_spec.json",)
DISTRIBUTED = ("common_c10d_spec.json", "ddp_spec.json", "dtensor_spec.json", "dtensor_tp_spec.json",
               "dtensor_composability_spec.json", "checkpoint_spec.json", "fsdp_spec.json", "fsdp_v2_spec.json",
               "fsdp_composability_spec.json", "replicate_composability_spec.json")
# (reason class, pattern over the vendor's reason, the rule that reproduces it or why none does)
CLASSES = (
    ("higher-order operator not imported", r"Higher-order operation '", "compiled_higher_order_ops"),
    ("no outputs", r"No outputs found", "compiled_no_outputs"),
    ("symbolic sizes, runtime asserts", r"torch\.runtime\.assert|statically shaped|target=<function sym_",
     "compiled_dynamic_shapes"),
    ("boolean index_put", r"Boolean index_put", "compiled_boolean_index_put"),
    ("aot_compile not serializable", r"SerializableCallable",
     "none needed: PyTorch's own check refuses the device backend's plain function, as TorchNeuron's"),
    ("send/recv", r"send_recv|send/rec|dist\.send\(\)", "pg_point_to_point"),
    ("all_to_all split and group sizes", r"[Oo]nly even split sizes|all to all base is not implemented|"
     r"process all_to_all|AllToAll unsupported world size|all_to_all failed", "pg_all_to_all"),
    ("barrier on a subgroup", r"Barrier is (only )?implemented (only )?for default group", "pg_default_group_barrier"),
    ("PRODUCT reduce op", r"PRODUCT operation unsupported", "pg_reduce_ops"),
    ("empty reduce-scatter", r"ReduceScatter with empty tensors", "pg_empty_tensors"),
    ("complex tensors in collectives", r"complex params not supported|return code 70 for complex64",
     "pg_complex_tensors"),
    ("ops torch-mlir does not know", r"legalize operation 'torch\.operator'",
     "not modelled: needs torch-mlir's op list matched against TorchNeuron's own decompositions; the graph here is "
     "Inductor's, whose squeeze.dims, _scaled_dot_product_flash_attention_for_cpu and "
     "_unsafe_masked_index_put_accumulate would be refused in every compiled Llama"),
    ("scalar and constant ops of a graph", r"torch\.aten\.(Int|Float)\.Tensor|torch\.constant\.int|NumToTensor|"
     r"tensor<i64>", "not modelled: lowering failures whose trigger the source does not show"),
    ("neuronx-cc compile errors", r"Compilation error occurred on Neuron for operation=torch_compile|COMPILATION FAILED",
     "not modelled: the compiler's internals are not in the snapshot"),
    ("backend closure not picklable", r"Can't pickle local object 'create_neuron_backend",
     "not modelled: an artefact of TorchNeuron's backend being a closure"),
    ("stream from the pool", r"stream from pool",
     "not modelled: the snapshot's runtime has a stream pool (csrc/c10/neuron/NeuronStream.cpp getStreamFromPool)"),
    ("device used before init_process_group", r"set_device\(device\) before|before init pg|should not be "
     r"initialized before the init_process_group|Neuron runtime setup failure",
     "not modelled: the built-in device keeps no runtime-initialised state to refuse (docs/device/distributed.md)"),
    ("CPU tensors and async save in a neuron group", r"found CPU tensors|device type cpu|Expected neuron device but "
     r"got: cpu|CPU backend must be enabled for async save",
     "not modelled: the group serves CPU tensors for mixed specs (cpu:gloo,neuron:neuron), which it cannot tell "
     "from a neuron-only one"),
)
SOURCES = {
    "compiled_higher_order_ops": "neuron_dynamo_backend/fx/fx_transform.py, fx/fx_importer.py, "
                                 "fx/passes/flex_attention_legalization.py; torch-mlir FxImporter._import_hop",
    "compiled_no_outputs": "neuron_dynamo_backend/fx/fx_transform.py, fx/passes/remove_none_outputs.py",
    "compiled_dynamic_shapes": "neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py",
    "compiled_boolean_index_put": "neuron_dynamo_backend/decompositions.py (index_put_decomposition)",
    "compiled_float64": "neuron_dynamo_backend/fx/passes/dtype_conversion.py, fx/fx_transform.py",
    "aot_compile": "neuron_dynamo_backend/backend.py (create_neuron_backend); torch/_dynamo/aot_compile.py",
    "pg_point_to_point": "distributed/backend.py (no send/recv; recv_anysource)",
    "pg_all_to_all": "distributed/backend.py (alltoall_base, alltoall), python_ops/xla_ops/all_to_all_xla.py",
    "pg_default_group_barrier": "distributed/backend.py (barrier, monitored_barrier)",
    "pg_reduce_ops": "python_ops/xla_ops/reduce_functions.py, all_reduce_xla.py, reduce_scatter_xla.py",
    "pg_empty_tensors": "distributed/utils.py (_validate_no_zero_dim0), python_ops/xla_ops/*_xla.py (can_handle)",
    "pg_complex_tensors": "specs/ddp_spec.json, specs/dtensor_spec.json",
}


def vendor_reasons(git_dir: Path) -> dict[str, Counter]:
    """Reason class -> listed tests per spec group ("dynamo", "distributed"), from the snapshot's specs."""
    counts: dict[str, Counter] = {}
    for group, files in (("dynamo", DYNAMO), ("distributed", DISTRIBUTED)):
        for name in files:
            text = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:{SPECS}{name}"],
                                  capture_output=True, text=True, check=True).stdout
            for config in json.loads(text)["test_configurations"]:
                for entry in [*(config.get("xfail") or []), *(config.get("skip_tests") or [])]:
                    if "tests" in entry:
                        pairs = [(entry.get("reason", ""), len(entry["tests"]) or 1)]
                    else:
                        pairs = [(value.get("reason", ""), 1) for value in entry.values() if isinstance(value, dict)]
                    for reason, n in pairs:
                        key = next((c for c, pattern, _ in CLASSES if re.search(pattern, reason)), "other")
                        counts.setdefault(key, Counter())[group] += n
    return counts


# ------------------------------------------------------------------ probes: compile (this process)
def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron")(*args)


def _outcome(fn, expect: str | None = None) -> bool:
    """With `expect`: fn raises an error whose text holds it. Without: fn runs."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is what the probe measures
        return expect is not None and expect in str(exc)
    return expect is None


def compile_probes() -> dict[str, dict]:
    from torch._higher_order_ops.while_loop import while_loop

    x = torch.linspace(-1.0, 1.0, 6, device="neuron")
    mask = x > 0
    wide = (torch.arange(1, 9, dtype=torch.float64) / 3).to("neuron")

    def set_masked(x, m, v):
        x = x.clone()
        x[m] = v
        return x

    def nonzero(capture: bool):
        torch._dynamo.config.capture_dynamic_output_shape_ops = capture
        try:
            return _compiled(lambda x: x.nonzero().sum(), x)
        finally:
            torch._dynamo.config.capture_dynamic_output_shape_ops = False

    def bump(x):
        x.add_(1)

    float32_of = torch.log1p(wide.cpu().float().double()).float().double()
    return {
        "compiled_higher_order_ops": {
            "refused": _outcome(lambda: _compiled(lambda x: torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,)), x),
                                "Higher-order operation 'cond' not implemented in the FxImporter"),
            "twins": {"torch.where": _outcome(lambda: _compiled(lambda x: torch.where(x.sum() > 0, x.sin(), x.cos()),
                                                                x)),
                      "while_loop": _outcome(lambda: _compiled(lambda x: while_loop(
                          lambda i, y: i < 2, lambda i, y: (i + 1, y * 2), (torch.tensor(0, device=x.device), x)), x))}},
        "compiled_no_outputs": {
            "refused": _outcome(lambda: _compiled(lambda x: (x + 1, 3)[1], x), "No outputs found in the module"),
            "twins": {"in-place update": _outcome(lambda: _compiled(bump, x.clone()))}},
        "compiled_dynamic_shapes": {
            "refused": _outcome(lambda: nonzero(True), "symbolic sizes or values"),
            "twins": {"graph break at nonzero": _outcome(lambda: nonzero(False))}},
        "compiled_boolean_index_put": {
            "refused": _outcome(lambda: _compiled(set_masked, x, mask, torch.ones(3, device="neuron")),
                                "Boolean index_put is not supported in torch.compile on Neuron"),
            "twins": {"one value": _outcome(lambda: _compiled(set_masked, x, mask, torch.tensor(1.0, device="neuron"))),
                      "torch.where": _outcome(lambda: _compiled(lambda x, m: torch.where(m, 1.0, x), x, mask))}},
        "compiled_float64": {
            "refused": torch.equal(_compiled(torch.log1p, wide).cpu(), float32_of),  # changed: computed in float32
            "twins": {"float32 bit-equal": torch.equal(_compiled(torch.log1p, x).cpu(), torch.log1p(x.cpu()))}},
        "aot_compile": {
            "refused": _outcome(lambda: torch.compile(torch.sin, backend="neuron", fullgraph=True).aot_compile(
                ((x,), {})), "does not implement SerializableCallable"),
            "twins": {"torch.compile": _outcome(lambda: _compiled(torch.sin, x))}},
    }


# ------------------------------------------------------------------ probes: the process group (workers)
def _pg_cases(rank: int, world: int, dev: torch.device) -> dict[str, tuple[str, object]]:
    """name -> (rule, case): refusals on `world` ranks as (rule, TorchNeuron's words, fn), twins as (rule, None, fn)."""
    import torch.distributed as dist

    def fresh(n: int = 2) -> torch.Tensor:
        return torch.full((n,), float(rank + 1), device=dev)

    def a2a(splits):
        out = torch.empty(sum(splits) if splits else world, device=dev)
        dist.all_to_all_single(out, torch.zeros(sum(splits) if splits else world, device=dev), splits, splits)

    def subgroup_barrier():
        group = dist.new_group([0])
        if rank == 0:
            dist.barrier(group=group)

    def p2p():
        if rank == 0:
            dist.send(fresh(), 1)
        elif rank == 1:
            dist.recv(fresh(), 0)

    def ddp_complex():
        model = torch.nn.Linear(2, 2).to(dev)
        model.phase = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64).to(dev))
        torch.nn.parallel.DistributedDataParallel(model)

    def fsdp2():
        from torch.distributed.fsdp import fully_shard

        model = fully_shard(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)).to(dev))
        model(torch.ones(2, 4, device=dev)).sum().backward()

    if world == 4:
        return {"a2a twos": ("pg_all_to_all", "Only even split sizes", lambda: a2a([2] * 4)),
                "all_to_all_single without splits": ("pg_all_to_all", None, lambda: a2a(None))}
    return {
        "send/recv": ("pg_point_to_point", "No backend type associated with device type neuron", p2p),
        "broadcast": ("pg_point_to_point", None, lambda: dist.broadcast(fresh(), src=0)),
        "a2a on 2 ranks": ("pg_all_to_all", "unsupported world size 2", lambda: a2a(None)),
        "subgroup barrier": ("pg_default_group_barrier", "Barrier is implemented only for default group",
                             subgroup_barrier),
        "default barrier": ("pg_default_group_barrier", None, dist.barrier),
        "PRODUCT": ("pg_reduce_ops", "unsupported reduce operation 'PRODUCT'",
                    lambda: dist.all_reduce(fresh(), op=dist.ReduceOp.PRODUCT)),
        "all_reduce SUM": ("pg_reduce_ops", None, lambda: dist.all_reduce(fresh())),
        "empty reduce_scatter": ("pg_empty_tensors", "tensors cannot be empty", lambda: dist.reduce_scatter_tensor(
            torch.empty(0, device=dev), torch.empty(0, device=dev))),
        "all_gather_into_tensor": ("pg_empty_tensors", None, lambda: dist.all_gather_into_tensor(
            torch.empty(2 * world, device=dev), fresh())),
        "DDP complex parameter": ("pg_complex_tensors", "complex params not supported", ddp_complex),
        "FSDP2 step": ("pg_complex_tensors", None, fsdp2),
    }


def _pg_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), TORCHFERRY_COLLECTIVE_TIMEOUT="60", TORCHFERRY_FALLBACK="silent")
    import torch.distributed as dist

    import torchferry.device

    torchferry.device.enable()
    dist.init_process_group("neuron", rank=rank, world_size=world)
    dev = torch.device("neuron", rank)
    results = {name: (rule, expect, _outcome(fn, expect)) for name, (rule, expect, fn) in
               _pg_cases(rank, world, dev).items()}
    dist.barrier()
    dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(json.dumps(results))


def pg_probes() -> dict[str, dict]:
    import torch.multiprocessing as mp

    probes: dict[str, dict] = {}
    for world in (2, 4):
        with tempfile.TemporaryDirectory() as out, socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            sock.close()
            mp.spawn(_pg_worker, args=(world, port, out), nprocs=world)
            ranks = [json.loads(Path(out, f"{r}.json").read_text()) for r in range(world)]
        for name, (rule, expect, _) in ranks[0].items():
            entry = probes.setdefault(rule, {"refused": True, "twins": {}})
            if expect is None:  # a twin runs on every rank
                entry["twins"][f"{name} ({world} ranks)"] = all(rank[name][2] for rank in ranks)
            else:  # rank 0 takes part in every refused probe (the subgroup is rank 0 alone)
                entry["refused"] = entry["refused"] and ranks[0][name][2]
    return probes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True, help="git dir of the torch-neuronx snapshot")
    parser.add_argument("--json", type=Path, help="write the figures here (versioned JSON, written atomically)")
    args = parser.parse_args(argv)
    if not (args.source / "HEAD").is_file():
        parser.error(f"--source {args.source}: not a git dir; fetch github:parmoham-aws/test-repo-parmoham and pass "
                     "the path of its git dir")
    counts = vendor_reasons(args.source)
    import torchferry.device

    os.environ["TORCHFERRY_FALLBACK"] = "silent"
    torchferry.device.enable()
    probes = {**compile_probes(), **pg_probes()}

    print(f"TorchNeuron {COMMIT}: listed failing tests by reason class (dynamo / distributed)")
    print(f"{'rule':28} {'reason class':38} {'tests':>11}  probe   twins")
    ok = True
    for cls, _, rule in CLASSES:
        key = rule if rule in probes else "aot_compile" if rule.startswith("none needed") else None
        if key is None:
            continue
        probe = probes[key]
        ok = ok and probe["refused"] and all(probe["twins"].values())
        tests = counts.get(cls, Counter())
        twins = ", ".join(f"{n} {'runs' if v else 'FAILS'}" for n, v in probe["twins"].items())
        print(f"{key:28} {cls:38} {tests['dynamo']:>4} / {tests['distributed']:<4}  "
              f"{'refused' if probe['refused'] else 'MISSED':7} {twins}")
        print(f"{'':28} source: {SOURCES[key]}")
    probe = probes["compiled_float64"]
    ok = ok and probe["refused"] and all(probe["twins"].values())
    print(f"{'compiled_float64':28} {'(no listed reason: a numerics rule)':38} {'-':>11}  "
          f"{'changed' if probe['refused'] else 'MISSED':7} {', '.join(probe['twins'])}"
          f" {'holds' if all(probe['twins'].values()) else 'FAILS'}")
    print(f"{'':28} source: {SOURCES['compiled_float64']}")
    print("\nnot modelled:")
    for cls, _, rule in CLASSES:
        if rule.startswith("not modelled"):
            tests = counts.get(cls, Counter())
            print(f"  {cls} ({tests['dynamo']} dynamo / {tests['distributed']} distributed tests): {rule[14:]}")
    other = counts.get("other", Counter())
    print(f"  other reasons ({other['dynamo']} dynamo / {other['distributed']} distributed tests): test-harness "
          "assertions, upstream checks and failures the reason does not explain")
    if args.json:
        data = {"format_version": FORMAT_VERSION, "commit": COMMIT, "ok": ok, "probes": probes,
                "classes": {cls: dict(counts.get(cls, Counter())) for cls, _, _ in CLASSES}}
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, args.json)
        print(f"wrote {args.json}")
    print("PASS: every probe refused (or changed), every twin runs" if ok else "FAIL: see MISSED / FAILS above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
