#!/usr/bin/env python3
"""The GPT example's training step on 2 MPI ranks of one thread each against
one process of 2 threads, and what the shards' sum costs a step.

Both train a copy of examples/gpt/gpt.qr (f32, B = 16; the held-out
evaluation and the checkpoints removed, as bench/gpt_step.py does) for
--steps steps:

  one process:  quire train gpt.qr --precision f32 --threads 2
  two ranks:    mpirun -n 2 quire train gpt.qr --precision f32 --threads 1
                (each rank 8 rows of each batch, the gradients summed by
                messages along the reduction tree, docs/distributed.md)

A step's time is the median of the differences of the metrics' elapsed_s
after --warmup steps (rank 0's clock under MPI). The sum's time is what the
run itself reports at its end: rank 0's mean time a step in the reduction
(its messages, and its wait for the slower rank), and a shard's bytes. Rounds
alternate the two ways.

    python3 bench/mpi_step.py --quire build/quire [--steps 60] [--warmup 10] [--rounds 3]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "gpt")


def example_copy(tmp):
    shutil.copytree(os.path.join(EXAMPLE, "data"), os.path.join(tmp, "data"))
    with open(os.path.join(EXAMPLE, "gpt.qr"), encoding="utf-8") as f:
        source = f.read()
    source = re.sub(r"^\s*evaluate .*\n", "", source, flags=re.M)
    source = re.sub(r"^\s*checkpoint every .*\n", "", source, flags=re.M)
    path = os.path.join(tmp, "gpt.qr")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return path


def step_seconds(run_dir, warmup):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        elapsed = [json.loads(line)["elapsed_s"] for line in f if line.strip()]
    return statistics.median(b - a for a, b in zip(elapsed[warmup:], elapsed[warmup + 1:]))


def train(cmd, tmp, run_dir):
    r = subprocess.run(cmd + ["--run-dir", run_dir], cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    quire = os.path.abspath(args.quire)
    mpirun = ["mpirun", "--oversubscribe", "-n", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    with tempfile.TemporaryDirectory() as tmp:
        program = example_copy(tmp)
        common = ["train", program, "--precision", "f32", "--max-steps", str(args.steps)]
        one, two, sums = [], [], []
        for r in range(args.rounds):
            run_dir = os.path.join(tmp, f"one-{r}")
            train([quire, *common, "--threads", "2"], tmp, run_dir)
            one.append(step_seconds(run_dir, args.warmup))
            run_dir = os.path.join(tmp, f"two-{r}")
            out = train(mpirun + [quire, *common, "--threads", "1"], tmp, run_dir)
            two.append(step_seconds(run_dir, args.warmup))
            m = re.search(r"the shards' sum.*?: (\d+) bytes a shard a step, ([0-9.]+) µs a step", out)
            if not m:
                sys.exit(f"the MPI run did not report its sum:\n{out}")
            sums.append((int(m.group(1)), float(m.group(2)) / 1e3))
            print(f"round {r + 1}: one process of 2 threads {one[-1] * 1e3:.2f} ms a step; 2 ranks of 1 thread "
                  f"{two[-1] * 1e3:.2f} ms a step, of which the sum {sums[-1][1]:.3f} ms ({sums[-1][0]} bytes a shard)")
        print(f"median: one process {statistics.median(one) * 1e3:.2f} ms, 2 ranks {statistics.median(two) * 1e3:.2f} ms "
              f"(ratio {statistics.median(two) / statistics.median(one):.2f}), the sum "
              f"{statistics.median(s[1] for s in sums):.3f} ms a step")


if __name__ == "__main__":
    main()
