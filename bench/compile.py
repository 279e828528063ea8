"""Benchmark of `torch.compile(backend="neuron")` on the built-in device (issue 4).

1. Steady state: a tiny Llama training step compiled with backend="neuron" on the device
   vs the same model compiled with Inductor on the CPU, steps alternating, median of the
   per-pair ratios (target <= 1.05). Reported for forward+backward (the compiled part) and
   for the whole step with the eager AdamW step.
2. Compile time: the first compiled training step (Dynamo + AOTAutograd + Inductor) in a
   fresh process with an empty cache (cold) and in another fresh process on the cache the
   first one left (warm); target warm <= 30% of cold.

Run: `python bench/compile.py [--steps 30] [--hidden 256] [--layers 2] [--seq 128] [--batch 4]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_COLD_WARM = """
import json, sys, time, torch, torchferry.device
torchferry.device.enable()
sys.path.insert(0, {bench_dir!r})
from compile import build
model, ids = build({args!r}, "neuron")
t = time.perf_counter()
compiled = torch.compile(model, backend="neuron")
compiled(input_ids=ids, labels=ids).loss.backward()
first = time.perf_counter() - t
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({{"first_step_s": first, "graphs": m["graphs"]}}))
"""


def build(args: dict, device: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=args["hidden"], intermediate_size=2 * args["hidden"],
        num_hidden_layers=args["layers"], num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max(256, args["seq"]), attn_implementation=args["attn"],
    )
    model = LlamaForCausalLM(config).to(device)
    ids = torch.randint(0, 512, (args["batch"], args["seq"])).to(device)
    return model, ids


def steady(args: dict) -> dict:
    import torch

    import torchferry.device

    torchferry.device.enable()
    sides = {}
    for device, backend in (("neuron", "neuron"), ("cpu", "inductor")):
        model, ids = build(args, device)
        compiled = torch.compile(model, backend=backend)
        # The same AdamW implementation on both (PyTorch picks foreach on accelerators only).
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        sides[device] = (compiled, opt, ids)

    def step(device: str) -> tuple[float, float]:
        compiled, opt, ids = sides[device]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids).loss.backward()
        fwd_bwd = time.perf_counter() - t
        opt.step()
        torch.accelerator.synchronize() if device != "cpu" else None
        return fwd_bwd, time.perf_counter() - t

    for _ in range(3):  # compile and warm up both
        step("neuron"), step("cpu")
    pairs = []
    for i in range(args["steps"]):
        order = ("neuron", "cpu") if i % 2 == 0 else ("cpu", "neuron")
        got = {d: step(d) for d in order}
        pairs.append(got)
    fb = [p["neuron"][0] / p["cpu"][0] for p in pairs]
    full = [p["neuron"][1] / p["cpu"][1] for p in pairs]
    return {
        "fwd_bwd_ratio_median": statistics.median(fb),
        "step_ratio_median": statistics.median(full),
        "neuron_fwd_bwd_ms": 1e3 * statistics.median(p["neuron"][0] for p in pairs),
        "cpu_fwd_bwd_ms": 1e3 * statistics.median(p["cpu"][0] for p in pairs),
        "neuron_step_ms": 1e3 * statistics.median(p["neuron"][1] for p in pairs),
        "cpu_step_ms": 1e3 * statistics.median(p["cpu"][1] for p in pairs),
    }


def cold_warm(args: dict) -> dict:
    code = _COLD_WARM.format(bench_dir=os.path.dirname(os.path.abspath(__file__)), args=args)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHFERRY_CACHE_DIR": cache}
        env.pop("TORCHFERRY_DISABLE_COMPILE_CACHE", None)
        runs = []
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"compile-time subprocess failed:\n{done.stderr[-4000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    return {
        "cold_first_step_s": cold["first_step_s"],
        "warm_first_step_s": warm["first_step_s"],
        "warm_over_cold": warm["first_step_s"] / cold["first_step_s"],
        "cold_cache": [g["cache"] for g in cold["graphs"]],
        "warm_cache": [g["cache"] for g in warm["graphs"]],
        "cold_compile_us": sum(g["torch_neuronx_compile_us"] for g in cold["graphs"]),
        "warm_compile_us": sum(g["torch_neuronx_compile_us"] for g in warm["graphs"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"],
                        help="transformers attention implementation (default: sdpa, transformers' own default)")
    args = vars(parser.parse_args())
    print(f"model: Llama hidden={args['hidden']} layers={args['layers']} batch={args['batch']} seq={args['seq']}")
    s = steady(args)
    print(
        f"steady  fwd+bwd  neuron {s['neuron_fwd_bwd_ms']:.2f} ms  inductor-cpu {s['cpu_fwd_bwd_ms']:.2f} ms  "
        f"median ratio {s['fwd_bwd_ratio_median']:.3f} (target <= 1.05)"
    )
    print(
        f"steady  step     neuron {s['neuron_step_ms']:.2f} ms  inductor-cpu {s['cpu_step_ms']:.2f} ms  "
        f"median ratio {s['step_ratio_median']:.3f} (AdamW eager on each device)"
    )
    c = cold_warm(args)
    print(
        f"compile first step  cold {c['cold_first_step_s']:.2f} s ({c['cold_cache']})  "
        f"warm {c['warm_first_step_s']:.2f} s ({c['warm_cache']})  "
        f"warm/cold {c['warm_over_cold']:.2f} (target <= 0.30)"
    )
    print(
        f"backend compile time (sum of torch_neuronx_compile_us)  cold {c['cold_compile_us'] / 1e6:.2f} s  "
        f"warm {c['warm_compile_us'] / 1e6:.2f} s"
    )
    print("results come back zero-copy (adopted device memory); no copying fallback is used")


if __name__ == "__main__":
    main()
