#!/usr/bin/env python3
"""A training step of the GPT example (examples/gpt/gpt.qr: D = 64, 2 blocks,
4 heads, T = 32, B = 16, V = 76, dropout 0.1): `quire train` against PyTorch
eager on the same threads, in one script.

quire runs `quire train --precision P --max-steps N` on a copy of the example
without its held-out evaluation and checkpoints; its step time is the median
of the differences of the metrics' `elapsed_s` after a warm-up. PyTorch runs
the same network in eager mode (F.embedding, F.layer_norm, the c_attn split
into heads, F.scaled_dot_product_attention(is_causal=True, dropout_p=0.1) as the
example drops the attention weights, F.gelu, F.dropout at its three other places, the tied read-out, F.cross_entropy) with
torch.optim.AdamW and clip_grad_norm_, timed around each step (forward,
backward, clip, update), in the same dtype. Both train on the example's data,
batches in file order.

    python3 bench/gpt_step.py --quire build/quire [--threads 1,2] [--steps 60]
                              [--precision f32] [--rounds 3] [--config example|gpt2-small]

--config gpt2-small runs GPT-2 small's shape instead (V = 50257, T = 64,
D = 768, 12 heads, 12 blocks, B = 4: 124M parameters) on random token ids
(seed 0, 64 windows), both sides on the same ids. Each side runs in a process
of its own (PyTorch in a child of this script), so that each one's peak
resident memory (getrusage's ru_maxrss, from wait4) is reported beside its
step time.

--rounds R alternates quire and PyTorch R times per thread count and reports
each round's ratio (PyTorch's step time / quire's: above 1, quire is faster)
and their median.

--half bf16 (or f16) measures quire's half step against quire's own f32 step
instead of PyTorch: the two alternate R times per thread count, and the ratio
is the f32 step time over the half one (above 1, the half type is faster).

--machine-profile measures quire's step with its kernels planned under the
shipped profile (QUIRE_PROFILE=shipped) against planned under a quick profile
of this machine (`quire profile calibrate --quick`, what `quire train` measures
on first use where the shipped profile does not describe the machine), the two
alternating R times per thread count; the ratio is the shipped plan's step
time over the machine's (above 1, the machine's plan is faster). QUIRE_ISA is
passed on: under QUIRE_ISA=avx2 both the calibration and the steps take the
AVX2 paths.
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

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "gpt")
V, T, D, H, L, B, P = 76, 32, 64, 4, 2, 16, 0.1
CONFIGS = {"example": (76, 32, 64, 4, 2, 16), "gpt2-small": (50257, 64, 768, 12, 12, 4)}


def use_config(name):
    global V, T, D, H, L, B
    V, T, D, H, L, B = CONFIGS[name]


def write_random_tokens(path):
    """64 windows of T + 1 random token ids in [0, V), seed 0: ids and next ids."""
    ids = np.random.default_rng(0).integers(0, V, size=(64, T + 1)).astype(np.int32)
    np.savez(path, **{"0": ids[:, :T], "1": ids[:, 1:]})


def quire_copy(tmp, config):
    shutil.copytree(os.path.join(EXAMPLE, "data"), os.path.join(tmp, "data"))
    with open(os.path.join(EXAMPLE, "gpt.qr"), encoding="utf-8") as f:
        source = f.read()
    if config != "example":
        for name, value in zip("VTDHL", (V, T, D, H, L)):
            source = re.sub(rf"^const {name} : nat = \d+", f"const {name} : nat = {value}", source, flags=re.M)
        source = re.sub(r"batch\(B = \d+\)", f"batch(B = {B})", source)
        write_random_tokens(os.path.join(tmp, "data", "train.npz"))
    source = re.sub(r"^\s*evaluate .*\n", "", source, flags=re.M)
    source = re.sub(r"^\s*checkpoint every .*\n", "", source, flags=re.M)
    source = re.sub(r"\|> shuffle\(seed = \d+\) ", "", source)
    path = os.path.join(tmp, "gpt.qr")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return path


def run_measured(cmd, env=None):
    """Runs cmd; returns its standard output and its peak resident bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{err.read().decode()[-3000:]}")
        return out.read().decode(), usage.ru_maxrss * 1024


def quire_step_seconds(quire, program, tmp, threads, precision, steps, warmup, extra=(), env=None):
    """The median step time, and the process's peak resident bytes."""
    run_dir = os.path.join(tmp, f"run-{threads}-{time.monotonic_ns()}")
    _, rss = run_measured([quire, "train", program, "--precision", precision, "--threads", str(threads),
                           "--max-steps", str(steps), "--run-dir", run_dir, *extra], env=env)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        elapsed = [json.loads(line)["elapsed_s"] for line in f if line.strip()]
    return statistics.median([b - a for a, b in zip(elapsed, elapsed[1:])][warmup:]), rss


def torch_step_seconds(torch, threads, precision, steps, warmup, data_path):
    torch.set_num_threads(threads)
    F = torch.nn.functional
    dtype = torch.float32 if precision == "f32" else torch.float64
    gen = torch.Generator().manual_seed(0)

    def normal(*shape):
        return (torch.randn(*shape, generator=gen, dtype=dtype) * 0.02).requires_grad_()

    def const(value, *shape):
        return torch.full(shape, value, dtype=dtype).requires_grad_()

    p = {"wte": normal(V, D), "wpe": normal(T, D), "lnf_g": const(1.0, D), "lnf_b": const(0.0, D)}
    blocks = [{"ln1_g": const(1.0, D), "ln1_b": const(0.0, D), "attn_w": normal(D, 3 * D), "attn_b": const(0.0, 3 * D),
               "proj_w": normal(D, D), "proj_b": const(0.0, D), "ln2_g": const(1.0, D), "ln2_b": const(0.0, D),
               "fc_w": normal(D, 4 * D), "fc_b": const(0.0, 4 * D), "out_w": normal(4 * D, D), "out_b": const(0.0, D)}
              for _ in range(L)]
    params = list(p.values()) + [t for b in blocks for t in b.values()]
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)

    def loss_of(ids, targets):
        x = F.dropout(F.embedding(ids, p["wte"]) + p["wpe"], P)
        for w in blocks:
            qkv = F.layer_norm(x, (D,), w["ln1_g"], w["ln1_b"]) @ w["attn_w"] + w["attn_b"]
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in qkv.split(D, dim=-1))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=P).transpose(1, 2).reshape(B, T, D)
            a = x + F.dropout(y @ w["proj_w"] + w["proj_b"], P)
            h = F.gelu(F.layer_norm(a, (D,), w["ln2_g"], w["ln2_b"]) @ w["fc_w"] + w["fc_b"])
            x = a + F.dropout(h @ w["out_w"] + w["out_b"], P)
        logits = F.layer_norm(x, (D,), p["lnf_g"], p["lnf_b"]) @ p["wte"].T
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    with np.load(data_path) as data:
        ids_all, targets_all = torch.tensor(data["0"], dtype=torch.int64), torch.tensor(data["1"], dtype=torch.int64)
    times = []
    for step in range(steps):
        k = step % (len(ids_all) // B)
        ids, targets = ids_all[k * B:(k + 1) * B], targets_all[k * B:(k + 1) * B]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


def torch_child(args):
    """Run as a child (--torch-child DATA): PyTorch's side alone, its step time printed as JSON."""
    import torch
    use_config(args.config)
    t = torch_step_seconds(torch, int(args.threads), args.precision, args.steps, args.warmup, args.torch_child)
    print(json.dumps({"step_s": t}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="f32", choices=["f32", "f64"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--config", default="example", choices=sorted(CONFIGS))
    ap.add_argument("--half", choices=["bf16", "f16"], help="quire's half step against its own f32 step")
    ap.add_argument("--machine-profile", action="store_true",
                    help="quire planned under the shipped profile against under this machine's quick profile")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    if not args.quire:
        sys.exit("--quire BUILD/quire is required")
    if args.half:
        return half_against_f32(args)
    if args.machine_profile:
        return machine_against_shipped(args)
    try:
        import torch  # noqa: F401 (checked here, used in the child)
    except ImportError:
        sys.exit("PyTorch is needed for the comparison (scripts/setup installs it into .venv)")
    use_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        program = quire_copy(tmp, args.config)
        data = os.path.join(tmp, "data", "train.npz")
        for threads in [int(t) for t in args.threads.split(",")]:
            ratios = []
            for r in range(args.rounds):
                q, q_rss = quire_step_seconds(os.path.abspath(args.quire), program, tmp, threads, args.precision,
                                              args.steps, args.warmup)
                out, t_rss = run_measured([sys.executable, os.path.abspath(__file__), "--torch-child", data,
                                           "--config", args.config, "--threads", str(threads), "--precision",
                                           args.precision, "--steps", str(args.steps), "--warmup", str(args.warmup)])
                t = json.loads(out.strip().splitlines()[-1])["step_s"]
                ratios.append(t / q)
                print(f"threads {threads} round {r + 1}: quire {q * 1e3:.2f} ms/step (peak resident "
                      f"{q_rss / 1e6:.0f} MB), PyTorch eager {t * 1e3:.2f} ms/step ({t_rss / 1e6:.0f} MB), "
                      f"PyTorch / quire {t / q:.2f}", flush=True)
            print(f"threads {threads} {args.precision} {args.config}: median PyTorch / quire "
                  f"{statistics.median(ratios):.2f} (above 1: quire is faster)")


def half_against_f32(args):
    use_config(args.config)
    quire = os.path.abspath(args.quire)
    with tempfile.TemporaryDirectory() as tmp:
        program = quire_copy(tmp, args.config)
        for threads in [int(t) for t in args.threads.split(",")]:
            ratios = []
            for r in range(args.rounds):
                f32, _ = quire_step_seconds(quire, program, tmp, threads, "f32", args.steps, args.warmup)
                half, _ = quire_step_seconds(quire, program, tmp, threads, args.half, args.steps, args.warmup)
                ratios.append(f32 / half)
                print(f"threads {threads} round {r + 1}: quire f32 {f32 * 1e3:.2f} ms/step, {args.half} "
                      f"{half * 1e3:.2f} ms/step, f32 / {args.half} {f32 / half:.2f}", flush=True)
            print(f"threads {threads} {args.config}: median f32 / {args.half} {statistics.median(ratios):.2f} "
                  f"(above 1: {args.half} is faster)")


def machine_against_shipped(args):
    use_config(args.config)
    quire = os.path.abspath(args.quire)
    with tempfile.TemporaryDirectory() as tmp:
        program = quire_copy(tmp, args.config)
        measured = os.path.join(tmp, "machine.json")
        run_measured([quire, "profile", "calibrate", "--quick", "-o", measured])
        shipped_env = dict(os.environ, QUIRE_PROFILE="shipped")
        for threads in [int(t) for t in args.threads.split(",")]:
            ratios = []
            for r in range(args.rounds):
                shipped, _ = quire_step_seconds(quire, program, tmp, threads, args.precision, args.steps, args.warmup,
                                                env=shipped_env)
                machine, _ = quire_step_seconds(quire, program, tmp, threads, args.precision, args.steps,
                                                args.warmup, extra=["--profile", measured])
                ratios.append(shipped / machine)
                print(f"threads {threads} round {r + 1}: shipped profile {shipped * 1e3:.2f} ms/step, this "
                      f"machine's {machine * 1e3:.2f} ms/step, shipped / machine {shipped / machine:.2f}", flush=True)
            print(f"threads {threads} {args.precision} {args.config} (QUIRE_ISA={os.environ.get('QUIRE_ISA', '')}): "
                  f"median shipped / machine {statistics.median(ratios):.2f} (above 1: the machine's plan is faster)")


if __name__ == "__main__":
    main()
