#!/usr/bin/env python3
"""One training step of the tutorial's tower at D = 256, L = 8, B = 256:
`quire train` against PyTorch eager on the same threads, in one script.

The model is the tutorial's Tower (06_tower.qr) at D = 256 and L = 8: eight
residual blocks x + Linear(gelu(RMSNorm(x))) and a linear head, trained on
the mean squared error with AdamW (lr 1e-3, no weight decay, constant
schedule) in f32. quire runs `quire train --precision f32` with each
--product-step (fma, the default: the packed products; separate: the
product and the sum rounded apart); PyTorch runs the same model in eager mode (torch.nn, erf gelu,
torch.optim.AdamW, f32). A step is the forward, the gradient and the update;
each side's figure is the median step time over the steps after a warm-up
(quire: from the trainer's metrics, elapsed time per step; PyTorch: timed
around each step). The data are random pairs written as an .npz with the
standard library.

    python3 bench/train_step.py --quire build/quire [--threads 2] [--steps 30]
                                [--rounds 5] [--product-step fma]

On a machine whose speed drifts (a shared virtual machine), --rounds R runs
quire (fma) and PyTorch alternately R times and reports each round's ratio
and their median: each ratio compares runs seconds apart.

PyTorch is optional: without it only quire's figures are printed.
"""

import argparse
import io
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

D, L, B = 256, 8, 256

PROGRAM = f"""
module Linear{{In Out : dim}} {{
  param w : ℝ[In, Out]  init = xavier_uniform
  param b : ℝ[Out]      init = zeros
  fn apply(x : ℝ[..., In]) -> ℝ[..., Out] = x · w + b
}}

module RMSNorm{{D : dim}} {{
  param γ : ℝ[D]  init = ones
  fn apply(x : ℝ[..., model: D], eps : f64 = 1e-6) -> ℝ[..., model: D] =
    let ms = mean(axis model, x^2)
    x / sqrt(ms + real(eps)) * γ
}}

const D : nat = {D}
const L : nat = {L}

module Block {{
  use norm : RMSNorm{{D}}
  use proj : Linear{{D, D}}
  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] = x + proj.apply(gelu(norm.apply(x)))
}}

module Tower {{
  use blocks : stack{{L}}(Block)
  use head   : Linear{{D, D}}
  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] = head.apply(blocks.apply(x))
}}

dim B

fn loss(θ : params Tower, batch : (ℝ[batch: B, model: D], ℝ[batch: B, model: D])) -> ℝ[] =
  let (x, y) = batch
  mean((Tower.apply(θ, x) - y)^2)

optimizer adamw {{
  lr           : f64 = 0.001
  weight_decay : f64 = 0.0
}}

training run {{
  model     = Tower
  objective = loss
  optimizer = adamw
  data      = stream "pairs.npz" |> batch(B = {B})
  epochs    : nat = 1
}}
"""


def npy_bytes(rows, cols, values):
    """A little-endian f8 .npy of shape (rows, cols)."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(f"<{len(values)}d", *values)


def write_data(path, samples):
    rng = random.Random(7)
    x = [rng.uniform(-1, 1) for _ in range(samples * D)]
    y = [rng.uniform(-1, 1) for _ in range(samples * D)]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("0.npy", npy_bytes(samples, D, x))
        z.writestr("1.npy", npy_bytes(samples, D, y))


def quire_step_seconds(quire, workdir, threads, product_step, warmup):
    run_dir = os.path.join(workdir, f"run-{product_step}")
    shutil.rmtree(run_dir, ignore_errors=True)
    subprocess.run([quire, "train", os.path.join(workdir, "tower.qr"), "--precision", "f32", "--product-step",
                    product_step, "--threads", str(threads), "--run-dir", run_dir],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        elapsed = [json.loads(line)["elapsed_s"] for line in f if line.strip()]
    steps = [b - a for a, b in zip(elapsed, elapsed[1:])][warmup:]
    return statistics.median(steps), len(steps)


def torch_step_seconds(threads, steps, warmup):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.nn.Parameter(torch.ones(D))

        def forward(self, x):
            return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.g

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm()
            self.proj = torch.nn.Linear(D, D)

        def forward(self, x):
            return x + self.proj(torch.nn.functional.gelu(self.norm(x)))

    model = torch.nn.Sequential(*[Block() for _ in range(L)], torch.nn.Linear(D, D))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    x = torch.rand(B, D) * 2 - 1
    y = torch.rand(B, D) * 2 - 1
    times = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:]), torch.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quire", default="build/quire")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--steps", type=int, default=30, help="timed steps after the warm-up")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="alternate quire (fma) and PyTorch this many times")
    ap.add_argument("--product-step", choices=("separate", "fma", "both"), default="both")
    ap.add_argument("--write-program", metavar="PATH",
                    help="write the tower's program to PATH and stop (bench_host_overhead reads it)")
    args = ap.parse_args()
    if args.write_program:
        with open(args.write_program, "w") as f:
            f.write(PROGRAM)
        return

    workdir = tempfile.mkdtemp(prefix="quire-train-step-")
    try:
        with open(os.path.join(workdir, "tower.qr"), "w") as f:
            f.write(PROGRAM)
        write_data(os.path.join(workdir, "pairs.npz"), B * (args.steps + args.warmup + 1))
        print(f"one training step, D = {D}, L = {L}, B = {B}, f32, AdamW, {args.threads} thread{'s' if args.threads != 1 else ''} "
              f"(median over {args.steps} steps after {args.warmup})")
        if args.rounds > 1:
            ratios = []
            for r in range(args.rounds):
                seconds, _ = quire_step_seconds(args.quire, workdir, args.threads, "fma", args.warmup)
                torch = torch_step_seconds(args.threads, args.steps, args.warmup)
                if torch is None:
                    print(f"  round {r + 1}: quire {seconds * 1e3:.2f} ms (PyTorch is not installed)")
                    continue
                ratios.append(torch[0] / seconds)
                print(f"  round {r + 1}: quire --product-step fma {seconds * 1e3:7.2f} ms, "
                      f"PyTorch {torch[1]} {torch[0] * 1e3:7.2f} ms: {ratios[-1]:5.2f}× PyTorch's speed")
            if ratios:
                print(f"  median over {len(ratios)} rounds: {statistics.median(ratios):5.2f}× PyTorch's speed "
                      f"(rounds {min(ratios):.2f}–{max(ratios):.2f}×)")
            return 0
        rows = []
        steps = ("separate", "fma") if args.product_step == "both" else (args.product_step,)
        for step in steps:
            seconds, n = quire_step_seconds(args.quire, workdir, args.threads, step, args.warmup)
            rows.append((f"quire --product-step {step}", seconds))
        torch = torch_step_seconds(args.threads, args.steps, args.warmup)
        if torch is not None:
            rows.append((f"PyTorch {torch[1]} eager", torch[0]))
        for name, seconds in rows:
            line = f"  {name:<34} {seconds * 1e3:9.2f} ms a step  {B / seconds:10.0f} samples/s"
            if torch is not None:
                line += f"  {torch[0] / seconds:5.2f}× PyTorch's speed"
            print(line)
        if torch is None:
            print("  (PyTorch is not installed: no peer figure)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
