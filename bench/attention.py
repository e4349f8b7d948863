#!/usr/bin/env python3
"""Causal attention forward and backward: quire's fused library kernel
against the same program running its lines (`--library-kernels off`), and
PyTorch's F.scaled_dot_product_attention(is_causal=True) for scale, in one
script.

The entry is the gradient of sum(causal_attention(q, k, v) · w) with
respect to q (its vjp computes dq, dk and dv, and the forward again), over
B = 2 batches of H = 4 heads, head width 64, at T = 256 and T = 1024, in f32
under `--product-step fma` (the default). quire's figure is `quire run
--repeat N`'s median call (compilation excluded); the two quire runs
alternate, so that each ratio compares runs seconds apart. PyTorch's is the
median of N timed forward + backward calls on the same threads.

    python3 bench/attention.py --quire build/quire [--threads 1,2] [--repeat 9] [--rounds 3]

PyTorch is optional: without it only quire's figures are printed.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

B, H, D = 2, 4, 64

PROGRAM = """dim B
dim H
dim T
dim D

fn loss(q : ℝ[b: B, h: H, t: T, d: D], k : ℝ[b: B, h: H, s: T, d: D], v : ℝ[b: B, h: H, s: T, d: D],
        w : ℝ[b: B, h: H, t: T, d: D]) -> ℝ[] =
  sum(causal_attention(q, k, v) * w)

fn step(q : ℝ[b: B, h: H, t: T, d: D], k : ℝ[b: B, h: H, s: T, d: D], v : ℝ[b: B, h: H, s: T, d: D],
        w : ℝ[b: B, h: H, t: T, d: D]) -> ℝ[b: B, h: H, t: T, d: D] =
  grad(loss)(q, k, v, w)
"""


def quire_ms(quire, path, T, threads, repeat, library):
    cmd = [quire, "run", path, "--entry", "step", "--precision", "f32", "--threads", str(threads),
           "--repeat", str(repeat), "--library-kernels", library]
    for name, size in (("B", B), ("H", H), ("T", T), ("D", D)):
        cmd += ["--dim", f"{name}={size}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"median ([0-9.]+) ms", out.stdout + out.stderr)
    if not m:
        sys.exit(f"attention.py: no median in quire's output:\n{out.stdout}{out.stderr}")
    return float(m.group(1))


def torch_ms(T, threads, repeat):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q, k, v, w = (torch.randn(B, H, T, D, generator=g, requires_grad=i < 3) for i in range(4))
    times = []
    for i in range(repeat + 2):
        start = time.perf_counter()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (out * w).sum().backward()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
        q.grad = k.grad = v.grad = None
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quire", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lengths", default="256,1024")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "attention.qr")
        with open(path, "w", encoding="utf-8") as f:
            f.write(PROGRAM)
        print(f"causal attention forward + backward, f32, B = {B}, H = {H}, head width {D}: median ms a call")
        print("| T | threads | quire fused | quire lines | lines / fused (each round) | PyTorch SDPA |")
        print("|---|---|---|---|---|---|")
        for T in (int(t) for t in a.lengths.split(",")):
            for threads in (int(t) for t in a.threads.split(",")):
                fused, lines, ratios = [], [], []
                for _ in range(a.rounds):
                    f_ms = quire_ms(a.quire, path, T, threads, a.repeat, "on")
                    l_ms = quire_ms(a.quire, path, T, threads, a.repeat, "off")
                    fused.append(f_ms)
                    lines.append(l_ms)
                    ratios.append(l_ms / f_ms)
                torch = torch_ms(T, threads, a.repeat)
                print(f"| {T} | {threads} | {statistics.median(fused):.2f} | {statistics.median(lines):.2f} | "
                      f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}) | "
                      f"{'-' if torch is None else f'{torch:.2f}'} |")


if __name__ == "__main__":
    main()
