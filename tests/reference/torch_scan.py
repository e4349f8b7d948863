"""The prelude's recurrences against PyTorch in f64, value and gradient.

  linear_scan   h[t] = a[t] * h[t - 1] + x[t] along a named time axis, h[0] = x[0],
                with leading axes; PyTorch's loop `a[..., t, :] * h + x[..., t, :]`
                gives the same bits (one product, one sum, as quire's step), and its
                autograd the gradients within 1e-12
  matrix_scan   h[t] = a[t] @ h[t - 1] + x[t] over 3 states; PyTorch's matmul loop
                within 1e-12, and the same loop with each state's terms added one at a
                time in the order of m: the same bits
  export        `quire export --target pytorch` of both: the exported module (its
                `qr.scan`) computes quire's bits

Each gradient is that of sum(f(a, x) * w) for a random cotangent w, in a and in x.
Every entry runs on the native backend and in the reference interpreter, which must
give the same bits. PyTorch is required (require_torch.py).
"""
import argparse
import importlib
import os
import subprocess
import sys
import tempfile

import numpy as np

from require_torch import import_torch

TOLERANCE = 1e-12
B, T, C, N = 2, 7, 3, 3

LA = f"ℝ[batch: {B}, time: {T}, chan: {C}]"
MA = f"ℝ[batch: {B}, time: {T}, row: {N}, col: {N}]"
MX = f"ℝ[batch: {B}, time: {T}, row: {N}]"

PROGRAM = f"""\
fn lin_obj(a : {LA}, x : {LA}, w : {LA}) -> ℝ[] = sum(linear_scan(a, x) * w)
fn lin(a : {LA}, x : {LA}, w : {LA}) -> ({LA}, {LA}, {LA}) =
  (linear_scan(a, x), grad(lin_obj, wrt = a)(a, x, w), grad(lin_obj, wrt = x)(a, x, w))

fn mat_obj(a : {MA}, x : {MX}, w : {MX}) -> ℝ[] = sum(matrix_scan(a, x) * w)
fn mat(a : {MA}, x : {MX}, w : {MX}) -> ({MX}, {MA}, {MX}) =
  (matrix_scan(a, x), grad(mat_obj, wrt = a)(a, x, w), grad(mat_obj, wrt = x)(a, x, w))

fn both(a : {LA}, x : {LA}, ma : {MA}, mx : {MX}) -> ({LA}, {MX}) = (linear_scan(a, x), matrix_scan(ma, mx))
"""


def run_quire(quire, tmp, entry, inputs, backend):
    npz = os.path.join(tmp, entry + "_in.npz")
    np.savez(npz, **inputs)
    out = os.path.join(tmp, f"{entry}_{backend}_out.npz")
    r = subprocess.run([quire, "run", os.path.join(tmp, "scans.qr"), "--entry", entry, "--inputs", npz, "--out", out,
                        "--backend", backend], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL quire run --entry {entry} --backend {backend} ({r.returncode}):\n{r.stdout}{r.stderr}")
    with np.load(out) as f:
        return {name: f[name] for name in f.files}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    rng = np.random.default_rng(5)
    n = rng.normal
    # Contractive enough that 7 steps keep the numbers moderate.
    ins = {
        "lin": {"a": n(size=(B, T, C)) * 0.8, "x": n(size=(B, T, C)), "w": n(size=(B, T, C))},
        "mat": {"a": n(size=(B, T, N, N)) * 0.5, "x": n(size=(B, T, N)), "w": n(size=(B, T, N))},
    }
    ins["both"] = {"a": ins["lin"]["a"], "x": ins["lin"]["x"], "ma": ins["mat"]["a"], "mx": ins["mat"]["x"]}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "scans.qr"), "w") as f:
            f.write(PROGRAM)
        got = {entry: run_quire(quire, tmp, entry, inputs, "native") for entry, inputs in ins.items()}
        reference = {entry: run_quire(quire, tmp, entry, inputs, "interp") for entry, inputs in ins.items()}
        failures += [f"{entry} {name}: the native backend differs from the reference interpreter"
                     for entry in got for name in got[entry]
                     if not np.array_equal(got[entry][name], reference[entry][name])]

        torch = import_torch()

        def leaf(v):
            return torch.tensor(v, dtype=torch.float64, requires_grad=True)

        def compare(name, quire_value, torch_value, exact=False):
            want = torch_value.detach().numpy()
            if quire_value.shape != want.shape or quire_value.dtype != np.float64:
                failures.append(f"{name}: quire gave {quire_value.dtype}{list(quire_value.shape)}, "
                                f"not float64{list(want.shape)}")
                return
            if exact:
                same = np.array_equal(quire_value, want)
                print(f"{name}: {'the same bits as' if same else 'NOT the same bits as'} PyTorch's")
                if not same:
                    failures.append(f"{name}: not PyTorch's bits (max difference "
                                    f"{np.max(np.abs(quire_value - want)):.3e})")
                return
            rel = np.max(np.abs(quire_value - want)) / np.max(np.abs(want))
            print(f"{name}: max relative difference to PyTorch {rel:.3e}")
            if not rel <= TOLERANCE:
                failures.append(f"{name}: {rel:.3e} from PyTorch, above {TOLERANCE}")

        # linear_scan: PyTorch's loop, value bit for bit, gradients by autograd
        li = ins["lin"]
        a, x = leaf(li["a"]), leaf(li["x"])
        h = [x[:, 0]]
        for t in range(1, T):
            h.append(a[:, t] * h[-1] + x[:, t])
        y = torch.stack(h, 1)
        (y * torch.tensor(li["w"])).sum().backward()
        compare("linear_scan", got["lin"]["result.0"], y, exact=True)
        compare("linear_scan gradient (a)", got["lin"]["result.1"], a.grad)
        compare("linear_scan gradient (x)", got["lin"]["result.2"], x.grad)
        if np.any(got["lin"]["result.1"][:, 0] != 0):
            failures.append("linear_scan gradient (a): not 0 at the first step, which does not read a")

        # matrix_scan: the matmul loop, and the loop in quire's order of terms
        ma = ins["mat"]
        a, x = leaf(ma["a"]), leaf(ma["x"])
        h = [x[:, 0]]
        for t in range(1, T):
            h.append((a[:, t] @ h[-1][..., None])[..., 0] + x[:, t])
        y = torch.stack(h, 1)
        (y * torch.tensor(ma["w"])).sum().backward()
        compare("matrix_scan", got["mat"]["result.0"], y)
        compare("matrix_scan gradient (a)", got["mat"]["result.1"], a.grad)
        compare("matrix_scan gradient (x)", got["mat"]["result.2"], x.grad)
        with torch.no_grad():
            at, xt = torch.tensor(ma["a"]), torch.tensor(ma["x"])
            h = [xt[:, 0]]
            for t in range(1, T):
                s = xt[:, t].clone()
                for m in range(N):
                    s = s + at[:, t, :, m] * h[-1][:, m:m + 1]
                h.append(s)
            compare("matrix_scan, terms in quire's order", got["mat"]["result.0"], torch.stack(h, 1), exact=True)

        # the PyTorch export of both
        out = os.path.join(tmp, "exported")
        r = subprocess.run([quire, "export", "scans.qr", "--target", "pytorch", "-o", out, "--entry", "both"],
                           cwd=tmp, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL quire export ({r.returncode}):\n{r.stdout}{r.stderr}")
        sys.path.insert(0, out)
        try:
            exported = importlib.import_module("scans")
        finally:
            sys.path.remove(out)
        bo = ins["both"]
        ys = exported.both(*(torch.tensor(bo[k]) for k in ("a", "x", "ma", "mx")))
        compare("exported linear_scan", got["both"]["result.0"], ys[0], exact=True)
        compare("exported matrix_scan", got["both"]["result.1"], ys[1], exact=True)

    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))
    print("torch_scan: OK")


if __name__ == "__main__":
    main()
