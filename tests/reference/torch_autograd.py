"""quire's `grad` against PyTorch autograd, in f64, on the same weights and batch.

Two models:
  - the tutorial's objective (examples/tutorial/07_train.qr, the Tower of
    06_tower.qr): the tutorial is copied into a temporary folder and its main
    file gets one more function, `fn reference_grad(…) = value_and_grad(loss)(…)`;
  - a two-layer tanh MLP that this script writes itself.
quire evaluates the value and gradient (`quire run --entry reference_grad
--params-out init.safetensors --out grad.safetensors`); PyTorch rebuilds the
model from the parameters in init.safetensors (so the script follows the
tutorial's parameter names: `final.γ` or a Linear head `head.w`, `head.b`),
runs autograd on the same batch, and every gradient must agree to 1e-12
relative: max |quire − torch| / max |torch| over each parameter's elements (an
element-wise ratio would divide by gradients that cancel to near zero).

quire's side is checked first: the gradient file must hold every parameter
with its shape, as F64, all finite. PyTorch is required (require_torch.py).
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import safetensors_file
from require_torch import import_torch

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIAL = os.path.join(HERE, "..", "..", "examples", "tutorial")
TOLERANCE = 1e-12

MLP_PROGRAM = """\
dim B

module MLP {
  param w1 : ℝ[4, 16]  init = xavier_uniform
  param b1 : ℝ[16]     init = zeros
  param w2 : ℝ[16, 3]  init = xavier_uniform
  param b2 : ℝ[3]      init = zeros

  fn apply(x : ℝ[batch: B, 4]) -> ℝ[batch: B, 3] =
    tanh(x · w1 + b1) · w2 + b2
}

fn loss(θ : params MLP, batch : (ℝ[batch: B, 4], ℝ[batch: B, 3])) -> ℝ[] =
  let (x, y) = batch
  mean((MLP.apply(θ, x) - y)^2)

fn reference_grad(θ : params MLP, batch : (ℝ[batch: B, 4], ℝ[batch: B, 3])) -> (ℝ[], params MLP) =
  value_and_grad(loss)(θ, batch)
"""


# ---------------------------------------------------------------- the models in PyTorch
# `torch` is passed in, so that torch_adamw.py can share these without this
# module importing PyTorch (absent from the project's venv).


def rms_norm(torch, x, gamma, eps=1e-6):
    """02_norm.qr: x / sqrt(mean(x²) + eps) * γ over the last (`model`) axis."""
    ms = torch.mean(x**2, dim=-1, keepdim=True)
    return x / torch.sqrt(ms + eps) * gamma


def tutorial_tower(torch, p, x):
    """06_tower.qr's Tower.apply on x : [B, D]; p maps quire's parameter paths to
    tensors. The blocks are stacked along axis 0 and applied first to last
    (`stack{L}`); then the final RMSNorm and/or a Linear head, whichever the
    parameters hold."""
    known = {"blocks.norm.γ", "blocks.proj.w", "blocks.proj.b", "final.γ", "head.w", "head.b"}
    unknown = sorted(set(p) - known)
    if unknown:
        raise ValueError(f"the tutorial's Tower has parameters this script does not model: {unknown}")
    for layer in range(p["blocks.proj.w"].shape[0]):
        h = torch.nn.functional.gelu(rms_norm(torch, x, p["blocks.norm.γ"][layer]))  # erf form
        x = x + (h @ p["blocks.proj.w"][layer] + p["blocks.proj.b"][layer])
    if "final.γ" in p:
        x = rms_norm(torch, x, p["final.γ"])
    if "head.w" in p:
        x = x @ p["head.w"] + p["head.b"]
    return x


def tutorial_loss(torch, p, x, y):
    """07_train.qr's loss: mean((Tower.apply(θ, x) − y)²)."""
    return torch.mean((tutorial_tower(torch, p, x) - y) ** 2)


def mlp_loss(torch, p, x, y):
    """MLP_PROGRAM's loss."""
    out = torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return torch.mean((out - y) ** 2)


# ---------------------------------------------------------------- quire's side


def run_quire(quire, cwd, *args):
    r = subprocess.run([quire, *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"quire {' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def objective_signature(source):
    """(objective name, its argument list as written, the argument names, the
    parameter tree's type) from a program's `training run` block."""
    m = re.search(r"^\s*objective\s*=\s*(\S+)\s*$", source, re.M)
    if not m:
        raise ValueError("the tutorial's training run names no `objective`")
    name = m.group(1)
    m = re.search(r"^fn " + re.escape(name) + r"\((.*?)\)\s*->\s*ℝ\[\]\s*=", source, re.M | re.S)
    if not m:
        raise ValueError(f"no `fn {name}(…) -> ℝ[] =` in the tutorial's main file")
    args = " ".join(m.group(1).split())
    # Argument declarations are `name : type`; axes inside a type are `name: size`.
    names = re.findall(r"(?:^|, )([^\s,()]+) : ", args)
    tree = re.search(r"^\S+ : (params [\w.]+)", args)
    if not tree:
        raise ValueError(f"`{name}`'s first argument is not a parameter tree: {args}")
    return name, args, names, tree.group(1)


def write_tutorial_case(tmp):
    """Copies the tutorial's programs into tmp/tutorial and appends the gradient
    entry to its main file; returns that file's path."""
    folder = os.path.join(tmp, "tutorial")
    os.makedirs(folder)
    for f in os.listdir(TUTORIAL):
        if f.endswith(".qr"):
            shutil.copy(os.path.join(TUTORIAL, f), folder)
    main = os.path.join(folder, "07_train.qr")
    with open(main, encoding="utf-8") as f:
        source = f.read()
    name, args, names, tree = objective_signature(source)
    with open(main, "a", encoding="utf-8") as f:
        f.write(f"\nfn reference_grad({args}) -> (ℝ[], {tree}) =\n  value_and_grad({name})({', '.join(names)})\n")
    return main


def write_mlp_case(tmp):
    path = os.path.join(tmp, "mlp.qr")
    with open(path, "w", encoding="utf-8") as f:
        f.write(MLP_PROGRAM)
    return path


def quire_value_and_grad(quire, stem, program, batch, seed, failures):
    """Runs `reference_grad` of program on batch = (x, y); returns (params, loss,
    grads), each tensor an f64 array, and appends quire-side failures."""
    folder = os.path.dirname(program)
    inputs = os.path.join(folder, stem + "_in.npz")
    np.savez(inputs, **{"batch.0": batch[0], "batch.1": batch[1]})
    init = os.path.join(folder, stem + "_init.safetensors")
    out = os.path.join(folder, stem + "_grad.safetensors")
    run_quire(quire, folder, "check", program)
    run_quire(quire, folder, "run", program, "--entry", "reference_grad", "--dim", f"B={len(batch[0])}",
              "--seed", str(seed), "--params-out", init, "--inputs", inputs, "--out", out)
    params = {}
    for path, (dtype, values) in safetensors_file.read(init).items():
        if dtype != "F64":
            failures.append(f"{stem}: parameter {path} written as {dtype}, expected F64")
        params[path] = values
    written = safetensors_file.read(out)
    loss = None
    if "result.0" not in written:
        failures.append(f"{stem}: no `result.0` (the loss) in the gradient file")
    else:
        loss = float(written["result.0"][1])
    grads = {}
    for path, values in params.items():
        entry = written.get("result.1." + path)
        if entry is None:
            failures.append(f"{stem}: no gradient `result.1.{path}`")
            continue
        dtype, g = entry
        if dtype != "F64":
            failures.append(f"{stem}: gradient of {path} written as {dtype}, expected F64")
        if g.shape != values.shape:
            failures.append(f"{stem}: gradient of {path} has shape {list(g.shape)}, the parameter {list(values.shape)}")
        elif not np.all(np.isfinite(g)):
            failures.append(f"{stem}: gradient of {path} is not finite")
        grads[path] = g
    extra = sorted(set(written) - {"result.0"} - {"result.1." + p for p in params})
    if extra:
        failures.append(f"{stem}: tensors that are no parameter's gradient: {extra}")
    if loss is not None and not math.isfinite(loss):
        failures.append(f"{stem}: the loss {loss} is not finite")
    print(f"{stem}: quire's loss {loss!r}; gradients of {len(grads)} parameters "
          f"({sum(g.size for g in grads.values())} reals), shapes and finiteness checked")
    return params, loss, grads


def relative_error(got, want):
    """max |got − want| over the elements, relative to max |want|."""
    scale = float(np.max(np.abs(want)))
    diff = float(np.max(np.abs(got - want)))
    return diff / scale if scale > 0 else diff


# ---------------------------------------------------------------- the comparison


def compare(torch, stem, loss_fn, params, batch, quire_loss, quire_grads, failures):
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    x, y = (torch.tensor(a, dtype=torch.float64) for a in batch)
    loss = loss_fn(torch, p, x, y)
    loss.backward()
    want = float(loss.detach())
    if quire_loss is not None:
        rel = abs(quire_loss - want) / abs(want)
        print(f"{stem}: loss quire {quire_loss!r}, torch {want!r}, relative error {rel:.3e}")
        if not rel <= TOLERANCE:
            failures.append(f"{stem}: the loss differs by {rel:.3e} relative")
    for path, g in quire_grads.items():
        rel = relative_error(g, p[path].grad.numpy())
        print(f"{stem}:   ∂{path:<14} max relative error {rel:.3e}")
        if not rel <= TOLERANCE:
            failures.append(f"{stem}: the gradient of {path} differs by {rel:.3e} relative")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    rng = np.random.default_rng(2027)
    x = rng.normal(size=(5, 4))
    tutorial_batch = (x, 2.0 * x + 1.0 + 0.1 * rng.normal(size=(5, 4)))
    mlp_batch = (rng.normal(size=(6, 4)), rng.normal(size=(6, 3)))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("tutorial", tutorial_loss, write_tutorial_case(tmp), tutorial_batch, 11),
            ("mlp", mlp_loss, write_mlp_case(tmp), mlp_batch, 5),
        ]
        results = [(stem, loss_fn, batch, *quire_value_and_grad(quire, stem, program, batch, seed, failures))
                   for stem, loss_fn, program, batch, seed in cases]
    torch = import_torch()
    for stem, loss_fn, batch, params, loss, grads in results:
        compare(torch, stem, loss_fn, params, batch, loss, grads, failures)
    for f in failures:
        print("FAIL", f)
    print(f"tolerance {TOLERANCE:g}: {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
