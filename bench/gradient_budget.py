#!/usr/bin/env python3
"""Training under a budget on the gradient (`quire solve --of gradient`).

On the tutorial (examples/tutorial/07_train.qr: a 3-block residual tower
learning y = 2·x + 1), for each parameter seed, runs

    quire calibrate 07_train.qr --entry loss --dim B=8 --samples 4 --seed S --out env.json
    quire solve 07_train.qr --precision env.json --of gradient --budget B --out r.json
    quire train 07_train.qr --seed S --params-out f64.safetensors            (all f64)
    quire train 07_train.qr --seed S --realize @r.json --params-out r.safetensors

then evaluates both trained parameter sets on the whole data set under f64
(`quire run --entry loss --dim B=1024`), and reads from each run's last line
the bytes one step writes at its sites (each value at its stored type, as
the compiled step writes them). It prints a Markdown table: the loss each
run reaches, their ratio, the bytes per step and their ratio.

With --check it exits 1 unless, at every seed, the run under the gradient
budget of 1e-2 reaches the f64 run's loss within 10 % and writes fewer bytes
a step (issue #24's target); the CTest `gradient_budget` runs it so.

Standard library only; run from anywhere (about 15 s):

    python3 bench/gradient_budget.py --quire build/quire [--check]
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEEDS = [0, 1, 2]
BUDGETS = ["1e-2", "1e-3"]


def run(args, cwd):
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"gradient_budget: {' '.join(args[1:3])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def whole_data(tutorial):
    """The data set as one batch: pairs.npz's arrays under the loss's argument paths."""
    out = tutorial / "all.npz"
    with zipfile.ZipFile(tutorial / "data" / "pairs.npz") as src, zipfile.ZipFile(out, "w") as dst:
        dst.writestr("batch.0.npy", src.read("0.npy"))
        dst.writestr("batch.1.npy", src.read("1.npy"))
    return out


def loss_of(quire, tutorial, params, data):
    out = run([quire, "run", "07_train.qr", "--entry", "loss", "--params", params, "--inputs", str(data),
               "--dim", "B=1024"], tutorial)
    return float(re.search(r"result = (\S+)", out).group(1))


def written(out):
    return int(re.search(r"(\d+) bytes written at their sites", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quire", default="build/quire")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the targets hold")
    args = ap.parse_args()
    quire = os.path.abspath(args.quire)
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tutorial = pathlib.Path(tmp) / "tutorial"
        shutil.copytree(ROOT / "examples" / "tutorial", tutorial)
        data = whole_data(tutorial)
        for seed in SEEDS:
            s = str(seed)
            out = run([quire, "train", "07_train.qr", "--seed", s, "--run-dir", f"f64-{s}", "--params-out",
                       f"f64-{s}.safetensors"], tutorial)
            f64_loss, f64_bytes = loss_of(quire, tutorial, f"f64-{s}.safetensors", data), written(out)
            run([quire, "calibrate", "07_train.qr", "--entry", "loss", "--dim", "B=8", "--samples", "4", "--seed", s,
                 "--out", f"env-{s}.json"], tutorial)
            for budget in BUDGETS:
                tag = f"{s}-{budget}"
                solve = run([quire, "solve", "07_train.qr", "--precision", f"env-{s}.json", "--of", "gradient",
                             "--budget", budget, "--out", f"r-{tag}.json"], tutorial)
                measured = float(re.search(r"^  measured\s+(\S+)", solve, re.M).group(1))
                out = run([quire, "train", "07_train.qr", "--seed", s, "--run-dir", f"r-{tag}", "--realize",
                           f"@r-{tag}.json", "--params-out", f"r-{tag}.safetensors"], tutorial)
                loss, nbytes = loss_of(quire, tutorial, f"r-{tag}.safetensors", data), written(out)
                rows.append((seed, budget, measured, f64_loss, loss, f64_bytes, nbytes))
                if budget == "1e-2":
                    if not abs(loss - f64_loss) <= 0.1 * f64_loss:
                        failures.append(f"seed {seed}: loss {loss:.4e} against f64's {f64_loss:.4e}")
                    if not nbytes < f64_bytes:
                        failures.append(f"seed {seed}: {nbytes} bytes a step, f64 {f64_bytes}")
    print("| seed | gradient budget | measured ‖∂θ − ∂θ*‖/‖∂θ*‖ | loss, f64 run | loss, under the budget | "
          "ratio | bytes a step, f64 | under the budget | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed, budget, measured, f64_loss, loss, f64_bytes, nbytes in rows:
        print(f"| {seed} | {budget} | {measured:.3e} | {f64_loss:.4e} | {loss:.4e} | {loss / f64_loss:.3f} | "
              f"{f64_bytes} | {nbytes} | {nbytes / f64_bytes:.3f} |")
    if args.check:
        for f in failures:
            print(f"gradient_budget: {f}", file=sys.stderr)
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
