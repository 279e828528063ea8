"""Benchmark of the coverage comparison's own peak memory on a large-vocabulary model (issue 30).

`ferry coverage` compares every gradient of the reference and the target (harness.parity.compare).
Judged whole, each comparison made float64 copies of both tensors and their masks: on a
large-vocabulary model the embedding and LM-head gradients alone made copies of several GB, and the
kernel killed the worker (helium), a failure of the measurement filed as the model's. The rule now
streams each tensor ``CHUNK`` elements at a time.

This bench builds the gradients a large-vocabulary causal LM's token embedding and LM head give
(reference and target, float32, ``--vocab`` x ``--hidden``), then in two fresh processes, side by
side, judges them: once streamed (the default ``CHUNK``) and once in a single chunk (the whole tensor
at once: what the comparison did before). Each process reports its peak resident memory above what
it held once the gradients existed. Target: the streamed comparison's extra peak <= 25% of the
gradients' own bytes (a small factor of the model's), and the verdicts and figures of both runs agree.

Run: `python bench/comparison_memory.py [--vocab 128256] [--hidden 512]`. Exit status 1 when a
target fails. These are host figures of the harness, not of any device.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

TARGET = 0.25  # streamed extra peak / the compared gradients' bytes


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def measure(vocab: int, hidden: int, whole: bool) -> dict:
    """One process's run: the gradients, then every comparison; peak resident memory above the gradients'."""
    import torch

    from torchferry.harness import parity

    gen = torch.Generator().manual_seed(0)
    grads = {}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        ref = torch.randn(vocab, hidden, generator=gen)
        grads[name] = (ref, ref + 1e-6 * torch.randn(vocab, hidden, generator=gen))
    held = sum(r.numel() * r.element_size() + t.numel() * t.element_size() for r, t in grads.values())
    if whole:
        parity.CHUNK = max(r.numel() for r, _ in grads.values())
    # the high-water mark so far is the gradients' building; reset it so the peak is the comparison's alone
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss_kib()
    verdicts = [parity.compare(n, r, t, None, 1e-2) for n, (r, t) in grads.items()]
    extra = max(0, _peak_kib() - before) * 1024
    return {"held_bytes": held, "extra_peak_bytes": extra, "chunk": parity.CHUNK,
            "verdicts": [(c.name, c.passed, c.status, round(c.max_abs_diff, 9), round(c.cosine, 9)) for c in verdicts]}


def _child(vocab: int, hidden: int, whole: bool) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {repr(sys.path[0])}); import comparison_memory as b; "
            f"print(json.dumps(b.measure({vocab}, {hidden}, {whole})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=128256, help="vocabulary (default: Llama 3's 128256)")
    parser.add_argument("--hidden", type=int, default=512, help="hidden width (default: 512)")
    args = parser.parse_args()
    streamed = _child(args.vocab, args.hidden, whole=False)
    whole = _child(args.vocab, args.hidden, whole=True)
    held = streamed["held_bytes"]
    gib = 2**30
    print(f"gradients compared: 2 tensors of {args.vocab} x {args.hidden} float32, reference and target: "
          f"{held / gib:.2f} GiB")
    for label, run in (("streamed (CHUNK %d)" % streamed["chunk"], streamed), ("whole tensor (before)", whole)):
        print(f"  {label:<28} extra peak {run['extra_peak_bytes'] / gib:6.2f} GiB = "
              f"{run['extra_peak_bytes'] / held:5.2f} x the gradients")
    ratio = streamed["extra_peak_bytes"] / held
    same = streamed["verdicts"] == whole["verdicts"]
    print(f"streamed / whole extra peak: {streamed['extra_peak_bytes'] / max(whole['extra_peak_bytes'], 1):.3f}")
    print(f"verdicts and figures identical: {same}")
    ok = ratio <= TARGET and same
    print(f"{'PASS' if ok else 'FAIL'}: streamed extra peak {ratio:.3f} x the gradients (target <= {TARGET})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
