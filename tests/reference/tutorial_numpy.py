"""The tutorial's loss, evaluated by quire's f64 interpreter and independently by
NumPy on the same weights and batch, must agree to 1e-12 relative.

quire draws the weights from a seed and writes them (--params-out, safetensors);
this script draws the batch, evaluates 06_tower.qr's Tower and 07_train.qr's loss
in NumPy from the tutorial's definitions, and compares. It also checks that
reading the weights back (--params) reproduces the same bits.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import safetensors_file

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIAL = os.path.join(HERE, "..", "..", "examples", "tutorial")


def read_safetensors(path):
    """The parameters quire wrote, each an f64 array."""
    out = {}
    for name, (dtype, values) in safetensors_file.read(path).items():
        assert dtype == "F64", (name, dtype)
        out[name] = values
    return out


erf = np.vectorize(math.erf)


def rms_norm(x, gamma, eps=1e-6):
    ms = np.mean(x**2, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * gamma


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def tower(p, x):
    for layer in range(p["blocks.proj.w"].shape[0]):
        h = gelu(rms_norm(x, p["blocks.norm.γ"][layer]))
        x = x + (h @ p["blocks.proj.w"][layer] + p["blocks.proj.b"][layer])
    return x @ p["head.w"] + p["head.b"]


def run(quire, *args):
    r = subprocess.run([quire, *args], cwd=TUTORIAL, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"quire {' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    rng = np.random.default_rng(2026)
    B = 5
    x = rng.normal(size=(B, 4))
    y = 2.0 * x + 1.0 + 0.1 * rng.normal(size=(B, 4))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        inputs = os.path.join(tmp, "in.npz")
        np.savez(inputs, **{"batch.0": x, "batch.1": y})
        params = os.path.join(tmp, "p.safetensors")
        out = os.path.join(tmp, "out.npy")
        run(quire, "run", "07_train.qr", "--entry", "loss", f"--dim", f"B={B}", "--seed", "11",
            "--params-out", params, "--inputs", inputs, "--out", out)
        p = read_safetensors(params)
        got = float(np.load(out))
        want = float(np.mean((tower(p, x) - y) ** 2))
        rel = abs(got - want) / abs(want)
        print(f"tutorial loss: quire {got!r}, numpy {want!r}, relative difference {rel:.3e}")
        if not rel <= 1e-12:
            print("FAIL: the relative difference exceeds 1e-12")
            failures += 1
        out2 = os.path.join(tmp, "out2.npy")
        run(quire, "run", "07_train.qr", "--entry", "loss", "--dim", f"B={B}", "--params", params,
            "--inputs", inputs, "--out", out2)
        again = float(np.load(out2))
        if np.float64(again).tobytes() != np.float64(got).tobytes():
            print(f"FAIL: reading the weights back gives {again!r}, not {got!r}")
            failures += 1
    print(f"{2 - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
