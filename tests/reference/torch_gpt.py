"""The GPT example against a PyTorch model of the same network, from the same weights.

examples/gpt/gpt.qr and its data/ are copied into a temporary folder, and the
copy changes in two places: `const P` (the dropout) becomes 0.0, since PyTorch
cannot draw quire's masks (torch_attention.py tests dropout's semantics on
quire's own mask), and the data line loses its `|> shuffle(seed = …)`, so that
every epoch visits the samples in file order: step s trains on batch
k = s mod (N div B), the samples [k·B, k·B + B) (the last N mod B samples of
each epoch are dropped, docs/training.md). The copy also gets one more entry,
`fn step0(…) = value_and_grad(loss)(…)`, the objective's value and gradient.

  1. step 0 in f64: `quire run --entry step0 --seed 0 --params-out
     init.safetensors` on the first batch draws the initial weights and
     evaluates the loss and every parameter's gradient; PyTorch (gpt_loss
     below) does the same in float64 from init.safetensors. The loss and each
     gradient must agree within 1e-12 relative (max |quire − torch| /
     max |torch| per tensor).
  2. step 0 in f32: the same under `--precision f32` from the same weights
     (quire's f32 masters, as `--params-out` writes them) against PyTorch in
     float32, within 1e-5.
  3. training in f64: `quire train --precision f64 --params init.safetensors
     --max-steps STEPS` against torch.optim.AdamW(foreach=False) with
     clip_grad_norm_ (the block's `clip`) and a LambdaLR of Hugging Face's
     multiplier for the block's schedule over the whole run's steps (as in
     torch_adamw.py), on the same batches in the same order. Each step's loss
     and gradient norm before clipping (quire's metrics.jsonl) must agree
     within 1e-10 relative; the learning rates and the final parameters are
     reported, not asserted: the key part of attn_b has a gradient of exactly
     0 (softmax does not change when every score of a query moves by one
     constant), so both runs move it by rounding noise, which AdamW divides by
     its eps, and its values (about 1e-12) differ between the two.

The PyTorch model mirrors gpt.qr: weights are quire's [in, out] (x @ w + b);
the embedding plus wpe, then per block (the stack's leading axis, first to
last) a = x + proj(causal_self_attention(attn(layer_norm₁(x)))) in GPT-2's
c_attn layout and x = a + out(gelu(fc(layer_norm₂(a)))) with the erf GELU;
then layer_norm_f and the read-out against wte (tied); the loss is
F.cross_entropy over every position (the mean). Every layer_norm has eps 1e-5.

quire's side is checked first (every gradient present, of its shape and
finite; a metrics line per step, each loss finite). PyTorch is required
(require_torch.py).
"""
import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

import safetensors_file
import torch_adamw
import torch_autograd
from require_torch import import_torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "gpt")
MAIN = "gpt.qr"
STEPS = 200
TOLERANCE_F64 = 1e-12
TOLERANCE_F32 = 1e-5
TOLERANCE_TRAIN = 1e-10

BLOCK_PARAMS = ("ln1_g", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b",
                "ln2_g", "ln2_b", "fc_w", "fc_b", "out_w", "out_b")
PARAMS = {"wte", "wpe", "lnf_g", "lnf_b"} | {"blocks." + name for name in BLOCK_PARAMS}


# ---------------------------------------------------------------- the model in PyTorch


def gpt_loss(torch, p, heads, ids, targets):
    """gpt.qr's loss(θ, (ids, targets)) without dropout; p maps quire's
    parameter paths to tensors, ids and targets are [B, T] int64."""
    F = torch.nn.functional
    unknown = sorted(set(p) ^ PARAMS)
    if unknown:
        raise ValueError(f"gpt.qr's parameters differ from the ones this script models: {unknown}")
    batch, context = ids.shape
    width = p["wte"].shape[1]
    x = F.embedding(ids, p["wte"]) + p["wpe"]
    for layer in range(p["blocks.attn_w"].shape[0]):
        w = {name: p["blocks." + name][layer] for name in BLOCK_PARAMS}
        qkv = F.layer_norm(x, (width,), w["ln1_g"], w["ln1_b"], eps=1e-5) @ w["attn_w"] + w["attn_b"]
        q, k, v = (t.view(batch, context, heads, width // heads).transpose(1, 2) for t in qkv.split(width, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, context, width)
        a = x + (y @ w["proj_w"] + w["proj_b"])
        h = F.gelu(F.layer_norm(a, (width,), w["ln2_g"], w["ln2_b"], eps=1e-5) @ w["fc_w"] + w["fc_b"])
        x = a + (h @ w["out_w"] + w["out_b"])
    logits = F.layer_norm(x, (width,), p["lnf_g"], p["lnf_b"], eps=1e-5) @ p["wte"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------- quire's side


def substitute(pattern, replacement, source, what):
    source, count = re.subn(pattern, replacement, source, flags=re.M)
    if count != 1:
        raise ValueError(f"{MAIN}: expected one {what}, found {count}")
    return source


def copy_example(tmp):
    """gpt.qr without dropout or shuffle, plus the `step0` entry, and its data,
    in tmp; returns (the run's settings, the head count)."""
    with open(os.path.join(EXAMPLE, MAIN), encoding="utf-8") as f:
        source = f.read()
    source = substitute(r"^(const P\s*:\s*f64\s*=\s*)[0-9.eE+-]+", r"\g<1>0.0", source, "`const P : f64 = …` (the dropout)")
    source = substitute(r"\s*\|>\s*shuffle\([^)]*\)", "", source, "`|> shuffle(…)`")
    heads = int(re.search(r"^const H\s*:\s*nat\s*=\s*(\d+)", source, re.M).group(1))
    name, args, names, tree = torch_autograd.objective_signature(source)
    source += f"\nfn step0({args}) -> (ℝ[], {tree}) =\n  value_and_grad({name})({', '.join(names)})\n"
    with open(os.path.join(tmp, MAIN), "w", encoding="utf-8") as f:
        f.write(source)
    shutil.copytree(os.path.join(EXAMPLE, "data"), os.path.join(tmp, "data"))
    return torch_adamw.training_run(source), heads


def quire_step0(binary, tmp, settings, precision, params, failures):
    """(initial parameters, loss, gradients) of `step0` on the first batch
    under precision: from --seed 0 under f64 (its draw written to
    init.safetensors), from that file under f32 (its f32 masters written)."""
    init = os.path.join(tmp, f"init_{precision}.safetensors")
    out = os.path.join(tmp, f"step0_{precision}.npz")
    source = ["--seed", "0"] if params is None else ["--params", params]
    torch_autograd.run_quire(binary, tmp, "run", MAIN, "--entry", "step0", "--precision", precision,
                             "--dim", f"{settings['batch_dim']}={settings['batch']}", *source,
                             "--params-out", init, "--inputs", os.path.join(tmp, "batch0.npz"), "--out", out)
    stored = {"f64": "F64", "f32": "F32"}[precision]
    start = {}
    for path, (dtype, values) in safetensors_file.read(init).items():
        if dtype != stored:
            failures.append(f"{precision}: parameter {path} written as {dtype}, expected {stored}")
        start[path] = values
    with np.load(out) as f:
        written = {k: f[k] for k in f.files}
    loss = float(written.pop("result.0"))
    grads = {}
    for path, values in start.items():
        g = written.pop("result.1." + path, None)
        if g is None:
            failures.append(f"{precision}: no gradient `result.1.{path}`")
        elif g.shape != values.shape:
            failures.append(f"{precision}: the gradient of {path} has shape {list(g.shape)}, the parameter {list(values.shape)}")
        elif not np.all(np.isfinite(g)):
            failures.append(f"{precision}: the gradient of {path} is not finite")
        else:
            g = g.astype(np.float64)
            # Under f32 every value must be an f32 number, whatever the file's dtype.
            if precision == "f32" and not np.array_equal(g.astype(np.float32).astype(np.float64), g):
                failures.append(f"f32: the gradient of {path} holds values that are not f32 numbers")
            grads[path] = g
    if written:
        failures.append(f"{precision}: results that are no parameter's gradient: {sorted(written)}")
    if not math.isfinite(loss):
        failures.append(f"{precision}: the loss {loss} is not finite")
    print(f"quire step 0 ({precision}): loss {loss!r}, gradients of {len(grads)} parameters "
          f"({sum(g.size for g in grads.values())} reals)")
    return os.path.relpath(init, tmp), start, loss, grads


def quire_train(binary, tmp, init, failures):
    """Every step's metrics and the final parameters of STEPS steps of
    `quire train --precision f64` from init."""
    run_dir = os.path.join(tmp, "run_f64")
    final = os.path.join(tmp, "final_f64.safetensors")
    began = time.monotonic()
    torch_autograd.run_quire(binary, tmp, "train", MAIN, "--precision", "f64", "--params", init, "--max-steps",
                             str(STEPS), "--run-dir", run_dir, "--params-out", final)
    print(f"quire train --precision f64: {STEPS} steps in {time.monotonic() - began:.1f} s")
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        metrics = [json.loads(line) for line in f]
    if [m["step"] for m in metrics] != list(range(1, STEPS + 1)):
        failures.append(f"train: metrics.jsonl has steps {[m['step'] for m in metrics][:5]}…, expected 1 … {STEPS}")
    for m in metrics:
        if not isinstance(m["loss"], float) or not math.isfinite(m["loss"]):
            failures.append(f"train: step {m['step']}'s loss is {m['loss']}")
    return metrics, {k: v for k, (_, v) in safetensors_file.read(final).items()}


# ---------------------------------------------------------------- the comparisons


def relative(got, want):
    return abs(got - want) / abs(want)


def compare_step0(torch, precision, dtype, tolerance, heads, batch, start, loss, grads, failures):
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in start.items()}
    ids, targets = (torch.tensor(a, dtype=torch.int64) for a in batch)
    want = gpt_loss(torch, p, heads, ids, targets)
    want.backward()
    worst = relative(loss, float(want.detach()))
    print(f"{precision}: loss quire {loss!r}, torch {float(want.detach())!r}, relative difference {worst:.3e}")
    if not worst <= tolerance:
        failures.append(f"{precision}: the step-0 loss differs by {worst:.3e} relative")
    for path, g in grads.items():
        rel = torch_autograd.relative_error(g, p[path].grad.to(torch.float64).numpy())
        worst = max(worst, rel)
        print(f"{precision}:   ∂{path:<16} max relative difference {rel:.3e}")
        if not rel <= tolerance:
            failures.append(f"{precision}: the gradient of {path} differs by {rel:.3e} relative")
    print(f"{precision}: step 0, worst {worst:.3e} (tolerance {tolerance:g})")


def compare_train(torch, heads, settings, data, start, metrics, final, failures):
    """STEPS AdamW steps in float64 from start, each step's loss and gradient
    norm against quire's metrics."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in start.items()}
    b = settings["batch"]
    per_epoch = len(data[0]) // b
    total = settings["epochs"] * per_epoch
    opt = torch.optim.AdamW(list(p.values()), lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                            eps=settings["eps"], weight_decay=settings["weight_decay"], foreach=False)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, torch_adamw.hf_multiplier(settings["schedule"], total))
    worst = {"loss": (0.0, 0), "grad_norm": (0.0, 0), "lr": (0.0, 0)}
    began = time.monotonic()
    for step, m in zip(range(STEPS), metrics):
        k = step % per_epoch
        ids, targets = (torch.tensor(a[k * b : k * b + b], dtype=torch.int64) for a in data)
        opt.zero_grad()
        loss = gpt_loss(torch, p, heads, ids, targets)
        loss.backward()
        if settings["clip"] is not None:
            norm = torch.nn.utils.clip_grad_norm_(list(p.values()), settings["clip"], foreach=False)
        else:
            norm = torch.sqrt(sum((q.grad**2).sum() for q in p.values()))
        got = {"loss": float(loss.detach()), "grad_norm": float(norm), "lr": opt.param_groups[0]["lr"]}
        for key, want in got.items():
            rel = abs(m[key] - want) / abs(want) if want != 0 else abs(m[key])
            if rel > worst[key][0]:
                worst[key] = (rel, step + 1)
        if step % 20 == 0 or step == STEPS - 1:
            print(f"train: step {step + 1:>3}  loss quire {m['loss']!r}, torch {got['loss']!r}, "
                  f"relative difference {relative(m['loss'], got['loss']):.3e}")
        opt.step()
        schedule.step()
    print(f"torch float64: {STEPS} steps of {total} in {time.monotonic() - began:.1f} s")
    for key, (rel, step) in worst.items():
        asserted = key != "lr"
        print(f"train: worst {key} relative difference {rel:.3e}" + (f" (step {step})" if step else "")
              + (f" (tolerance {TOLERANCE_TRAIN:g})" if asserted else " (reported)"))
        if asserted and not rel <= TOLERANCE_TRAIN:
            failures.append(f"train: the {key} differs by {rel:.3e} relative at step {step}")
    params = max(torch_autograd.relative_error(final[k], p[k].detach().numpy()) for k in p)
    print(f"train: final parameters, worst max relative difference {params:.3e} (reported)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    binary = os.path.abspath(ap.parse_args().quire)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        settings, heads = copy_example(tmp)
        print("training run (dropout 0, shuffle removed): " + ", ".join(f"{k} = {v}" for k, v in settings.items()))
        with np.load(os.path.join(tmp, settings["data"])) as f:
            data = (f["0"], f["1"])
        b = settings["batch"]
        batch = (data[0][:b], data[1][:b])
        np.savez(os.path.join(tmp, "batch0.npz"), **{"batch.0": batch[0], "batch.1": batch[1]})
        init, start64, loss64, grads64 = quire_step0(binary, tmp, settings, "f64", None, failures)
        _, start32, loss32, grads32 = quire_step0(binary, tmp, settings, "f32", init, failures)
        metrics, final = quire_train(binary, tmp, init, failures)
    if metrics and metrics[0]["loss"] != loss64:
        failures.append(f"train: step 1's loss {metrics[0]['loss']!r} is not step0's {loss64!r}")
    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))

    torch = import_torch()
    # One thread: the model is small, and PyTorch's intra-op threads on a busy
    # machine (a parallel ctest, a build) made its 200 steps take six times longer.
    torch.set_num_threads(1)
    compare_step0(torch, "f64", torch.float64, TOLERANCE_F64, heads, batch, start64, loss64, grads64, failures)
    compare_step0(torch, "f32", torch.float32, TOLERANCE_F32, heads, batch, start32, loss32, grads32, failures)
    compare_train(torch, heads, settings, data, start64, metrics, final, failures)
    for f in failures:
        print("FAIL", f)
    print("FAILED" if failures else f"PASS the GPT's loss, gradients and {STEPS} AdamW steps match PyTorch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
