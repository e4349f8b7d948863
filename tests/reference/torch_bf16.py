"""quire under --precision bf16 against PyTorch on the same inputs.

Two cases, each run by `quire run --precision bf16 --out F.safetensors`:
  - the prelude's rms_norm on bf16 input and weight, against torch's
    F.rms_norm on bf16 tensors (which returns its input's dtype);
  - a matmul of f32 data and an f32 weight, against torch.autocast("cpu",
    bfloat16) (bf16 operands, a bf16 result).
Each must give a BF16 tensor, and values within the documented tolerance
(docs/numerics.md): 1 bf16 ulp for the matmul, 2 for rms_norm, whose last
product quire rounds to bf16 twice (x·r, then ·γ) where PyTorch rounds once.

quire's side is checked first (its dtypes); PyTorch is required
(require_torch.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import safetensors_file
from require_torch import import_torch

PROGRAM = """\
fn norm(x : ℝ[b: 8, d: 64], γ : ℝ[d: 64]) -> ℝ[b: 8, d: 64] = rms_norm(x as bf16, γ as bf16)
fn mm(x : ℝ[b: 8, k: 64], w : ℝ[k: 64, o: 32]) -> ℝ[b: 8, o: 32] = x · w
"""


def run_quire(quire, program, entry, inputs, tmp):
    npz = os.path.join(tmp, entry + "_in.npz")
    np.savez(npz, **inputs)
    out = os.path.join(tmp, entry + "_out.safetensors")
    subprocess.run(
        [quire, "run", program, "--entry", entry, "--precision", "bf16", "--inputs", npz, "--out", out],
        check=True,
        capture_output=True,
    )
    return safetensors_file.read(out)["result"]


def ulps_apart(a, b):
    """Distance in bf16 units in the last place of the larger magnitude."""
    scale = np.maximum(np.abs(a), np.abs(b))
    ulp = np.where(scale > 0, 2.0 ** (np.floor(np.log2(np.where(scale > 0, scale, 1.0))) - 7), 2.0**-133)
    return np.abs(a - b) / ulp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quire", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    g = (1.0 + 0.1 * rng.standard_normal(64)).astype(np.float32)
    w = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "cases.qr")
        with open(program, "w", encoding="utf-8") as f:
            f.write(PROGRAM)
        norm_dtype, norm = run_quire(args.quire, program, "norm", {"x": x, "γ": g}, tmp)
        mm_dtype, mm = run_quire(args.quire, program, "mm", {"x": x, "w": w}, tmp)
    failures = []
    for name, dtype in (("rms_norm", norm_dtype), ("matmul", mm_dtype)):
        if dtype != "BF16":
            failures.append(f"{name}: quire wrote {dtype}, expected BF16")
    torch = import_torch()
    F = torch.nn.functional
    xt = torch.from_numpy(x)
    want_norm = F.rms_norm(xt.bfloat16(), (64,), torch.from_numpy(g).bfloat16(), eps=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want_mm = xt @ torch.from_numpy(w)
    for name, want, got, tolerance in (("rms_norm", want_norm, norm, 2), ("matmul", want_mm, mm, 1)):
        if want.dtype != torch.bfloat16:
            failures.append(f"{name}: PyTorch gave {want.dtype}")
        worst = float(np.max(ulps_apart(want.float().numpy().astype(np.float64), got)))
        print(f"{name}: worst distance {worst:.2f} bf16 ulp (tolerance {tolerance})")
        if worst > tolerance:
            failures.append(f"{name}: {worst} ulp apart")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
