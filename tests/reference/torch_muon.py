"""`quire train` under an `optimizer muon` block against torch.optim.Muon + torch.optim.AdamW.

A small network (PROGRAM below: a 4 → 16 input layer, two stacked residual
16 × 16 blocks, a 16 → 3 read-out) is trained on a synthetic regression set
written here (64 samples, batches of 16 in file order: step s trains on batch
s mod 4).

  - `quire run --entry loss --seed 0 --params-out init.safetensors` draws the
    initial weights (f64; the f32 run starts from them rounded, as its masters);
  - `quire train --precision P --params init.safetensors --params-out
    final.safetensors` trains STEPS steps, and once more with --max-steps 1;
  - PyTorch rebuilds the network from init.safetensors in P's dtype and takes
    the same steps with torch.optim.Muon on the matrices and
    torch.optim.AdamW(foreach=False) on the rest, each with a LambdaLR of
    Hugging Face's multiplier for the block's schedule (torch_adamw.py). quire
    holds a linear weight [in, out]; PyTorch's Muon expects nn.Linear's
    [out, in], so PyTorch's leaves are the transposes (x @ w is x @ W.T), and
    each copy of the stacked block is a leaf of its own. `adamw_params`
    sends w_out to AdamW, as a user would a read-out head.

Two runs: f64 with adjust_lr_fn = original, f32 with match_rms_adamw.

What is compared, and the tolerances. Newton–Schulz runs in bf16 on both
sides, with the same operations (products accumulated in f32, each addmm
rounded once to bf16): on one matrix quire gives PyTorch's bits except where
the two f32 accumulations, summed in different orders, round to different
bf16 values; such a flip moves an element by one bf16 ulp (2⁻⁸ relative) and
the iteration spreads it to its neighbours, so the orthogonalized update O
then agrees only to about one bf16 ulp of its largest elements (measured:
max |ΔO| ≤ 2⁻⁸ on 48 × 80 matrices, where most seeds flip something). One
update moves a weight by lr'·O, so a step with a flip leaves the parameters
about lr'·2⁻⁸ apart; the next gradients differ by as much, which flips other
bf16 roundings, and the differences grow with the steps. So the tolerances
are stated against the size of the training's own movement,
max |torch − init| per parameter:
  - after EARLY steps, max |quire − torch| ≤ EARLY_TOLERANCE of it (1.5 bf16
    ulps of the updates; measured: 2.8e-15 under f64 and 1.0e-5 under f32, no
    flip in these four steps: what is left is the f64 and f32 roundings of
    the element-wise updates, which PyTorch fuses and quire does not);
  - after STEPS steps, max |quire − torch| ≤ FINAL_TOLERANCE of it (measured:
    1.1e-2 under f64 and 1.5e-2 under f32, in blocks.w);
  - every step's loss within LOSS_TOLERANCE relative (measured: 9.5e-4, 6.0e-4).
The AdamW parameters see the matrices' differences through the gradients
only (measured 2e-4 to 7e-4 of their movement after STEPS steps).

quire's side is checked first (every parameter present, finite, moved, of its
shape and stored type; the matrices Muon took, from `quire train`'s output).
PyTorch is required (require_torch.py).
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

import safetensors_file
import torch_adamw
import torch_autograd
from require_torch import import_torch

STEPS = 40
EARLY = 4  # the warmup's first update has lr 0: the fourth is the first at the full rate
EARLY_TOLERANCE = 6e-3
FINAL_TOLERANCE = 5e-2
LOSS_TOLERANCE = 1e-2
SAMPLES, BATCH = 64, 16

PROGRAM = """\
dim B

module Block{{D : dim}} {{
  param w : ℝ[D, D]  init = xavier_uniform
  param b : ℝ[D]     init = zeros
  fn apply(x : ℝ[..., D]) -> ℝ[..., D] = x + tanh(x · w + b)
}}

module Net {{
  param w_in  : ℝ[4, 16]  init = xavier_uniform
  param b_in  : ℝ[16]     init = zeros
  use blocks  : stack{{2}}(Block{{16}})
  param w_out : ℝ[16, 3]  init = xavier_uniform
  param b_out : ℝ[3]      init = zeros
  fn apply(x : ℝ[batch: B, 4]) -> ℝ[batch: B, 3] =
    blocks.apply(tanh(x · w_in + b_in)) · w_out + b_out
}}

fn loss(θ : params Net, batch : (ℝ[batch: B, 4], ℝ[batch: B, 3])) -> ℝ[] =
  let (x, y) = batch
  mean((Net.apply(θ, x) - y)^2)

optimizer muon {{
  lr                 = 0.02
  weight_decay       = 0.05
  momentum           = 0.95
  nesterov           = true
  adjust_lr_fn       = {adjust}
  adamw_lr           = 0.003
  adamw_beta1        = 0.9
  adamw_beta2        = 0.99
  adamw_weight_decay = 0.01
  adamw_params       = "w_out"
  schedule           : cosine(warmup = 3)
}}

training run {{
  model     = Net
  objective = loss
  optimizer = muon
  data      = stream "data.npz" |> batch(B = {batch})
  epochs    : nat = {epochs}
}}
"""
MUON = ["w_in", "blocks.w"]  # the matrices Muon takes (blocks.w: two copies)
SETTINGS = {"lr": 0.02, "weight_decay": 0.05, "momentum": 0.95, "adamw_lr": 0.003, "adamw_betas": (0.9, 0.99),
            "adamw_weight_decay": 0.01, "schedule": "cosine(warmup = 3)"}
RUNS = [("f64", "original"), ("f32", "match_rms_adamw")]


def make_data(path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((SAMPLES, 4))
    y = np.stack([np.sin(x[:, 0] + x[:, 1]), x[:, 2] * x[:, 3], np.tanh(x.sum(axis=1))], axis=1)
    np.savez(path, x, y)
    return x, y


# ---------------------------------------------------------------- quire's side


def quire_runs(binary, tmp, precision, adjust, failures):
    """(initial, after EARLY steps, final) parameters and the per-step losses."""
    epochs = math.ceil(STEPS * BATCH / SAMPLES)
    with open(os.path.join(tmp, "net.qr"), "w", encoding="utf-8") as f:
        f.write(PROGRAM.format(adjust=adjust, batch=BATCH, epochs=epochs))
    dtype = {"f64": "F64", "f32": "F32"}[precision]
    init = os.path.join(tmp, f"init_{precision}.safetensors")
    source = ["--seed", "0"] if precision == "f64" else ["--params", os.path.join(tmp, "init_f64.safetensors")]
    torch_autograd.run_quire(binary, tmp, "run", "net.qr", "--entry", "loss", "--dim", f"B={BATCH}", "--precision",
                             precision, *source, "--params-out", init)
    out = {}
    losses = None
    for steps in (EARLY, STEPS):
        final = os.path.join(tmp, f"final_{precision}_{steps}.safetensors")
        run_dir = os.path.join(tmp, f"run_{precision}_{steps}")
        text = torch_autograd.run_quire(binary, tmp, "train", "net.qr", "--precision", precision, "--params", init,
                                        "--max-steps", str(steps), "--run-dir", run_dir, "--params-out", final)
        if steps == EARLY and "muon" not in text:
            failures.append(f"{precision}: `quire train` does not say it runs muon:\n{text}")
        out[steps] = torch_adamw.read_params(final, dtype, f"{precision} after {steps}", failures)
        with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
            losses = [json.loads(line)["loss"] for line in f if line.strip()]
    start = torch_adamw.read_params(init, dtype, f"{precision} init", failures)
    end = out[STEPS]
    if sorted(end) != sorted(start):
        failures.append(f"{precision}: the final parameters are {sorted(end)}, the initial {sorted(start)}")
    for name, values in end.items():
        if name in start and (not np.all(np.isfinite(values)) or np.array_equal(values, start[name])):
            failures.append(f"{precision}: {name} is not finite or did not move in {STEPS} steps")
    if len(losses) != STEPS or not all(math.isfinite(x) for x in losses):
        failures.append(f"{precision}: metrics.jsonl holds {len(losses)} losses for {STEPS} steps, or one not finite")
    print(f"quire train --precision {precision} (adjust_lr_fn {adjust}): {STEPS} steps, last loss {losses[-1]:.6g}")
    return start, out[EARLY], end, losses


# ---------------------------------------------------------------- PyTorch's side


def torch_train(torch, init, data, precision, adjust, steps):
    """The parameters (quire's names and layout, f64 arrays) after `steps`
    steps of Muon + AdamW from init, and each step's loss."""
    dtype = {"f64": torch.float64, "f32": torch.float32}[precision]

    def leaf(a):
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype, requires_grad=True)

    # PyTorch's [out, in] weights: the transposes of quire's [in, out].
    w_in = leaf(init["w_in"].T)
    blocks_w = [leaf(init["blocks.w"][i].T) for i in range(init["blocks.w"].shape[0])]
    others = {k: leaf(init[k]) for k in ("b_in", "blocks.b", "w_out", "b_out")}
    muon = torch.optim.Muon([w_in, *blocks_w], lr=SETTINGS["lr"], weight_decay=SETTINGS["weight_decay"],
                            momentum=SETTINGS["momentum"], nesterov=True, adjust_lr_fn=adjust)
    adamw = torch.optim.AdamW(list(others.values()), lr=SETTINGS["adamw_lr"], betas=SETTINGS["adamw_betas"],
                              weight_decay=SETTINGS["adamw_weight_decay"], foreach=False)
    per_epoch = SAMPLES // BATCH
    total = math.ceil(STEPS * BATCH / SAMPLES) * per_epoch
    multiplier = torch_adamw.hf_multiplier(SETTINGS["schedule"], total)
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, multiplier) for o in (muon, adamw)]
    losses = []
    for step in range(steps):
        k = step % per_epoch
        x, y = (torch.tensor(a[k * BATCH : k * BATCH + BATCH], dtype=dtype) for a in data)
        muon.zero_grad()
        adamw.zero_grad()
        h = torch.tanh(x @ w_in.T + others["b_in"])
        for i, w in enumerate(blocks_w):
            h = h + torch.tanh(h @ w.T + others["blocks.b"][i])
        loss = torch.mean((h @ others["w_out"] + others["b_out"] - y) ** 2)
        loss.backward()
        losses.append(float(loss.detach()))
        muon.step()
        adamw.step()
        for s in schedules:
            s.step()
    out = {k: v.detach().to(torch.float64).numpy() for k, v in others.items()}
    out["w_in"] = w_in.detach().to(torch.float64).numpy().T
    out["blocks.w"] = np.stack([w.detach().to(torch.float64).numpy().T for w in blocks_w])
    return out, losses


def compare(label, got, want, start, tolerance, failures):
    """Each parameter's max |quire − torch| against how far PyTorch moved it."""
    worst = 0.0
    for name in sorted(want):
        moved = float(np.max(np.abs(want[name] - start[name])))
        diff = float(np.max(np.abs(got[name] - want[name])))
        rel = diff / moved if moved > 0 else diff
        worst = max(worst, rel)
        role = "muon " if name in MUON else "adamw"
        print(f"{label}:   {role} {name:<9} max |quire − torch| {diff:.3e}, moved {moved:.3e}: {rel:.3e} of it")
    print(f"{label}: worst {worst:.3e} (tolerance {tolerance:g})")
    if not worst <= tolerance:
        failures.append(f"{label}: the parameters differ by {worst:.3e} of their movement (tolerance {tolerance:g})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    binary = os.path.abspath(ap.parse_args().quire)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(os.path.join(tmp, "data.npz"))
        runs = {p: quire_runs(binary, tmp, p, adjust, failures) for p, adjust in RUNS}
    torch = import_torch()
    for precision, adjust in RUNS:
        start, early, end, quire_losses = runs[precision]
        want_early, _ = torch_train(torch, start, data, precision, adjust, EARLY)
        compare(f"{precision} after {EARLY} steps", early, want_early, start, EARLY_TOLERANCE, failures)
        want, torch_losses = torch_train(torch, start, data, precision, adjust, STEPS)
        compare(f"{precision} after {STEPS} steps", end, want, start, FINAL_TOLERANCE, failures)
        rel = [abs(q - t) / abs(t) for q, t in zip(quire_losses, torch_losses)]
        print(f"{precision}: losses {torch_losses[0]:.6g} → {torch_losses[-1]:.6g} (torch), "
              f"{quire_losses[-1]:.6g} (quire); worst relative difference {max(rel):.3e} at step {rel.index(max(rel)) + 1} "
              f"(tolerance {LOSS_TOLERANCE:g})")
        if not max(rel) <= LOSS_TOLERANCE:
            failures.append(f"{precision}: a step's loss differs by {max(rel):.3e} relative")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
