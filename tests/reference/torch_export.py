"""`quire export --target pytorch` run with PyTorch against `quire run`, in f64.

For the tutorial (examples/tutorial/07_train.qr: entries `loss` and
`Tower.apply`, which `quire run` reaches through an entry `tower` added to a
copy of the file, since an entry cannot take `...` axes) and the GPT example (examples/gpt/gpt.qr: `held_out`, which has
no dropout, and `Gpt.apply` at p = 0), this script

  1. runs `quire run --precision f64 --seed 0` on one batch of the example's
     data, writing the parameters (`--params-out F.safetensors`) and the result
     (`--out Y.npy`); later entries of one example read the same parameters
     (`--params`);
  2. runs `quire export FILE --target pytorch -o DIR --entry …` and checks that
     DIR holds one module per source file with a reached function, plus
     quire_prelude.py (the GPT uses the prelude), quire_runtime.py and README.md;
  3. imports the exported modules, loads the same parameters by path, calls each
     entry with the same inputs in float64 and requires
     max |quire − torch| / max |quire| ≤ 1e-12 (and the same shape).

A draw whose probability is not 0 or 1 must raise the export's DrawError: the
GPT's `loss` (dropout P = 0.1) is called once to check that it does.
PyTorch is required (require_torch.py).
"""
import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from require_torch import import_torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
TOLERANCE = 1e-12


def run(quire, cwd, *args):
    r = subprocess.run([quire, *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL quire {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def load_params(torch, path):
    """The parameters by path, loaded as the exported README says (safetensors.torch.load_file)."""
    import safetensors.torch  # installed by scripts/setup beside torch
    out = safetensors.torch.load_file(path)
    for name, t in out.items():
        if t.dtype != torch.float64:
            sys.exit(f"FAIL {path}: {name} is {t.dtype}, expected float64 under --precision f64")
    return out


def compare(failures, what, quire_value, torch_value):
    q = np.asarray(quire_value, dtype=np.float64)
    t = torch_value.detach().numpy().astype(np.float64)
    if q.shape != t.shape:
        failures.append(f"{what}: quire's shape {list(q.shape)}, the export's {list(t.shape)}")
        return
    if not np.all(np.isfinite(q)):
        failures.append(f"{what}: quire's result is not finite")
        return
    scale = max(float(np.max(np.abs(q))), np.finfo(np.float64).tiny)
    rel = float(np.max(np.abs(q - t))) / scale
    print(f"{what}: shape {list(q.shape)}, max |quire - torch| / max |quire| = {rel:.3e}")
    if not rel <= TOLERANCE:
        failures.append(f"{what}: relative difference {rel:.3e} above {TOLERANCE:g}")


def fresh_import(folder, names):
    sys.path.insert(0, folder)
    try:
        for name in list(sys.modules):
            if name.startswith("_0") or name in ("gpt", "quire_prelude", "quire_runtime"):
                del sys.modules[name]
        return {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(folder)


def expect_files(failures, folder, names):
    found = sorted(os.listdir(folder))
    if found != sorted(names):
        failures.append(f"{folder}: wrote {found}, expected {sorted(names)}")


def tutorial(torch, quire, tmp, failures):
    work = os.path.join(tmp, "tutorial")
    shutil.copytree(os.path.join(EXAMPLES, "tutorial"), work)
    data = np.load(os.path.join(work, "data", "pairs.npz"))
    x, y = data["0"][:8].astype(np.float64), data["1"][:8].astype(np.float64)
    np.savez(os.path.join(work, "batch.npz"), **{"batch.0": x, "batch.1": y})
    np.savez(os.path.join(work, "x.npz"), x=x)
    # Tower.apply takes `...` axes, which `quire run` cannot take as an entry: the
    # copy gets an entry that calls it at [batch: B, model: 4].
    with open(os.path.join(work, "07_train.qr"), "a", encoding="utf-8") as f:
        f.write("\nfn tower(θ : params t.Tower, x : ℝ[batch: B, model: 4]) -> ℝ[batch: B, model: 4] =\n"
                "  t.Tower.apply(θ, x)\n")
    run(quire, work, "run", "07_train.qr", "--entry", "loss", "--dim", "B=8", "--seed", "0", "--precision", "f64",
        "--params-out", "p.safetensors", "--inputs", "batch.npz", "--out", "loss.npy")
    run(quire, work, "run", "07_train.qr", "--entry", "tower", "--dim", "B=8", "--precision", "f64",
        "--params", "p.safetensors", "--inputs", "x.npz", "--out", "tower.npy")
    out = os.path.join(work, "pytorch")
    run(quire, work, "export", "07_train.qr", "--target", "pytorch", "-o", out, "--entry", "loss",
        "--entry", "Tower.apply")
    expect_files(failures, out, ["_01_linear.py", "_02_norm.py", "_06_tower.py", "_07_train.py",
                                 "quire_runtime.py", "README.md"])
    m = fresh_import(out, ["_07_train", "_06_tower"])
    θ = load_params(torch, os.path.join(work, "p.safetensors"))
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    compare(failures, "tutorial loss", np.load(os.path.join(work, "loss.npy")), m["_07_train"].loss(θ, (tx, ty)))
    compare(failures, "tutorial Tower.apply", np.load(os.path.join(work, "tower.npy")),
            m["_06_tower"].Tower.apply(θ, tx))


def gpt(torch, quire, tmp, failures):
    work = os.path.join(tmp, "gpt")
    shutil.copytree(os.path.join(EXAMPLES, "gpt"), work, ignore=shutil.ignore_patterns("corpus.txt"))
    data = np.load(os.path.join(work, "data", "val.npz"))
    ids, nxt = data["0"][:4], data["1"][:4]
    np.savez(os.path.join(work, "batch.npz"), **{"batch.0": ids, "batch.1": nxt})
    np.savez(os.path.join(work, "apply.npz"), ids=ids, p=np.array([0.0]))
    run(quire, work, "run", "gpt.qr", "--entry", "held_out", "--dim", "B=4", "--seed", "0", "--precision", "f64",
        "--params-out", "p.safetensors", "--inputs", "batch.npz", "--out", "held_out.npy")
    run(quire, work, "run", "gpt.qr", "--entry", "Gpt.apply", "--dim", "B=4", "--precision", "f64",
        "--params", "p.safetensors", "--inputs", "apply.npz", "--out", "logits.npy")
    out = os.path.join(work, "pytorch")
    run(quire, work, "export", "gpt.qr", "--target", "pytorch", "-o", out, "--entry", "held_out",
        "--entry", "Gpt.apply", "--entry", "loss")
    expect_files(failures, out, ["gpt.py", "quire_prelude.py", "quire_runtime.py", "README.md"])
    m = fresh_import(out, ["gpt", "quire_runtime"])["gpt"]
    θ = load_params(torch, os.path.join(work, "p.safetensors"))
    tids, tnxt = torch.from_numpy(ids), torch.from_numpy(nxt)
    compare(failures, "gpt held_out", np.load(os.path.join(work, "held_out.npy")), m.held_out(θ, (tids, tnxt), None))
    compare(failures, "gpt Gpt.apply (p = 0)", np.load(os.path.join(work, "logits.npy")),
            m.Gpt.apply(θ, tids, None, 0.0))
    # The training loss draws dropout masks at P = 0.1: PyTorch cannot, and says so.
    runtime = sys.modules["quire_runtime"]
    try:
        m.loss(θ, (tids, tnxt), None)
        failures.append("gpt loss (dropout 0.1) ran; the export cannot draw quire's masks and must refuse")
    except runtime.DrawError as e:
        print(f"gpt loss (dropout 0.1) refused as expected: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quire", required=True)
    args = parser.parse_args()
    quire = os.path.abspath(args.quire)
    torch = import_torch()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tutorial(torch, quire, tmp, failures)
        gpt(torch, quire, tmp, failures)
    for f in failures:
        print("FAIL", f)
    if failures:
        sys.exit(1)
    print("torch_export: OK")


if __name__ == "__main__":
    main()
