"""The prelude's causal_mask, under a softmax, against PyTorch in f64.

`softmax(causal_mask(x))` over scores x : [heads, queries, keys] (more keys than
queries, and T not a power of two) is compared with
torch.softmax(x.masked_fill(ones(T, S).triu(1).bool(), -inf), -1), and the
gradient of a weighted sum of it with autograd's. The masked places must be
exactly 0 in both the value and the gradient; the rest within 1e-13 relative.

quire's side runs first; PyTorch is required (require_torch.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from require_torch import import_torch

H, T, S = 3, 5, 7

PROGRAM = f"""\
fn probs(x : ℝ[h: {H}, q: {T}, k: {S}]) -> ℝ[h: {H}, q: {T}, k: {S}] = softmax(causal_mask(x))
fn objective(x : ℝ[h: {H}, q: {T}, k: {S}], w : ℝ[h: {H}, q: {T}, k: {S}]) -> ℝ[] = sum(softmax(causal_mask(x)) * w)
fn gradient(x : ℝ[h: {H}, q: {T}, k: {S}], w : ℝ[h: {H}, q: {T}, k: {S}]) -> ℝ[h: {H}, q: {T}, k: {S}] =
  grad(objective, wrt = x)(x, w)
"""


def run_quire(quire, tmp, entry, inputs):
    npz = os.path.join(tmp, entry + "_in.npz")
    np.savez(npz, **inputs)
    out = os.path.join(tmp, entry + "_out.npy")
    r = subprocess.run([quire, "run", os.path.join(tmp, "mask.qr"), "--entry", entry, "--inputs", npz, "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL quire run --entry {entry} ({r.returncode}):\n{r.stdout}{r.stderr}")
    return np.load(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(H, T, S)) * 3
    w = rng.normal(size=(H, T, S))
    masked = np.triu(np.ones((T, S), dtype=bool), 1)  # key s after query t
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "mask.qr"), "w") as f:
            f.write(PROGRAM)
        probs = run_quire(quire, tmp, "probs", {"x": x})
        grad = run_quire(quire, tmp, "gradient", {"x": x, "w": w})
    for name, got in (("probs", probs), ("gradient", grad)):
        if got.shape != (H, T, S) or got.dtype != np.float64:
            failures.append(f"{name}: quire gave {got.dtype}{list(got.shape)}, not float64{[H, T, S]}")
        elif np.any(got[:, masked] != 0):
            failures.append(f"{name}: quire is not exactly 0 at every masked place")
    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))

    torch = import_torch()
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    fill = torch.tensor(masked)
    pt = torch.softmax(xt.masked_fill(fill, float("-inf")), dim=-1)
    (pt * torch.tensor(w)).sum().backward()
    for name, got, want in (("probs", probs, pt.detach().numpy()), ("gradient", grad, xt.grad.numpy())):
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        print(f"{name}: max relative difference to PyTorch {rel:.3e}")
        if not rel <= 1e-13:
            failures.append(f"{name}: {rel:.3e} from PyTorch, above 1e-13")
        if np.any(want[:, masked] != 0):
            failures.append(f"{name}: PyTorch is not 0 at a masked place (the reference is wrong)")
    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))
    print("PASS causal_mask matches PyTorch's masked_fill + softmax, value and gradient")


if __name__ == "__main__":
    main()
