"""`quire train` against torch.optim.AdamW: 100 steps of the tutorial's training run.

The tutorial (examples/tutorial/07_train.qr and what it imports, its data file
beside them) is copied into a temporary folder, and the data line loses its
`|> shuffle(seed = …)`, so that every epoch visits the samples in file order:
step s trains on batch k = s mod (N div B), the samples [k·B, k·B + B).
Then
  - `quire run --entry <objective> --params-out init.safetensors` draws the
    initial parameters;
  - `quire train --precision f64 --params init.safetensors --max-steps 100
    --params-out final.safetensors` trains from them;
  - PyTorch rebuilds the model in f64 from init.safetensors (the model of
    torch_autograd.py) and takes the same 100 steps with
    torch.optim.AdamW(foreach=False) and a LambdaLR of Hugging Face's
    multiplier for the block's schedule, over the whole run's steps
    (epochs × (N div B)), though it stops after 100.
Every final parameter must agree to 1e-6 relative: max |quire − torch| /
max |torch| over its elements. The optimizer block is read from the source by
this script, not from quire. The same run under --precision f32 against a
PyTorch float32 run is reported, not asserted: quire's f32 update rounds once
per value where PyTorch rounds after every operation (docs/training.md).

quire's side is checked first: the final parameters must be every
parameter, with its shape and stored type, finite, and moved from the initial
ones. PyTorch is required (require_torch.py).
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
import torch_autograd
from require_torch import import_torch

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIAL = os.path.join(HERE, "..", "..", "examples", "tutorial")
MAIN = "07_train.qr"
STEPS = 100
TOLERANCE_F64 = 1e-6


# ---------------------------------------------------------------- the training run, read from the source


def block(source, header):
    """The lines of the `header { … }` or indented `header` block (the body up
    to the next unindented line)."""
    m = re.search(r"^" + header + r"\s*\{?\s*\n((?:[ \t]+.*\n|\s*\n)*)", source, re.M)
    if not m:
        raise ValueError(f"no `{header}` block in {MAIN}")
    lines = []
    for line in m.group(1).splitlines():
        line = re.sub(r"\s--\s.*$", "", line).strip()
        if line and line != "}":
            lines.append(line)
    return lines


def fields(lines):
    """`name [: type] = value` and `name : value` lines as {name: value}."""
    out = {}
    for line in lines:
        m = re.match(r"(\S+)\s*(?::\s*(?:f64|f32|nat|bool)\s*=|:|=)\s*(.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def training_run(source):
    """The settings of the main file's training run and its optimizer."""
    run = fields(block(source, r"training\s+run"))
    data = run["data"]
    m = re.match(r'stream\s+"([^"]+)"(.*)$', data)
    if not m:
        raise ValueError(f"the data line `{data}` is not `stream \"FILE\" |> …`")
    path, stages = m.group(1), m.group(2)
    stages = re.findall(r"\|>\s*(\w+)\(([^)]*)\)", stages)
    if [name for name, _ in stages] != ["batch"]:
        raise ValueError(f"the data line `{data}` is not `stream \"FILE\" |> batch(B = b)` once shuffle is gone")
    dim, size = (s.strip() for s in stages[0][1].split("="))
    opt_name = run["optimizer"]
    opt = fields(block(source, r"optimizer\s+" + re.escape(opt_name)))
    kind = opt.pop("kind", opt_name)
    if kind != "adamw":
        raise ValueError(f"optimizer `{opt_name}` is {kind}: this script compares AdamW only")
    settings = {
        "objective": run["objective"],
        "data": path,
        "batch_dim": dim,
        "batch": int(size),
        "epochs": int(run.get("epochs", "1")),
        # PyTorch's defaults, as quire's (docs/training.md).
        "lr": 1e-3, "weight_decay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "clip": None,
        "schedule": "constant",
    }
    aliases = {"β1": "beta1", "β2": "beta2", "ε": "eps"}
    for key, value in opt.items():
        key = aliases.get(key, key)
        if key == "schedule":
            settings[key] = value
        elif key in settings and key not in ("objective", "data", "batch_dim", "batch", "epochs"):
            settings[key] = float(value)
        else:
            raise ValueError(f"optimizer `{opt_name}`: field `{key}` is not modelled by this script")
    return settings


def hf_multiplier(schedule, total):
    """Hugging Face transformers' lr_lambda for the schedule (get_constant_schedule,
    get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
    get_cosine_schedule_with_warmup with num_cycles = 0.5), as written there."""
    m = re.fullmatch(r"(constant|linear|cosine)\s*(?:\(\s*(?:warmup\s*=\s*(\d+))?\s*\))?", schedule)
    if not m:
        raise ValueError(f"schedule `{schedule}` is not modelled by this script")
    kind, warmup = m.group(1), int(m.group(2) or 0)
    num_cycles = 0.5

    def lr_lambda(current_step):
        if current_step < warmup:
            return float(current_step) / float(max(1, warmup))
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, float(total - current_step) / float(max(1, total - warmup)))
        progress = float(current_step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))

    return lr_lambda


# ---------------------------------------------------------------- quire's side


def copy_tutorial(tmp):
    """The tutorial's programs in tmp, the main file without shuffle; returns
    the run's settings."""
    for f in os.listdir(TUTORIAL):
        if f.endswith(".qr"):
            shutil.copy(os.path.join(TUTORIAL, f), tmp)
    main = os.path.join(tmp, MAIN)
    with open(main, encoding="utf-8") as f:
        source = f.read()
    source = re.sub(r"\s*\|>\s*shuffle\([^)]*\)", "", source)
    with open(main, "w", encoding="utf-8") as f:
        f.write(source)
    settings = training_run(source)
    os.makedirs(os.path.join(tmp, os.path.dirname(settings["data"])), exist_ok=True)
    shutil.copy(os.path.join(TUTORIAL, settings["data"]), os.path.join(tmp, settings["data"]))
    return settings


def read_params(path, dtype, stem, failures):
    out = {}
    for name, (stored, values) in safetensors_file.read(path).items():
        if stored != dtype:
            failures.append(f"{stem}: {name} stored as {stored}, expected {dtype}")
        out[name] = values
    return out


def quire_train(binary, tmp, settings, precision, failures):
    """(initial, final) parameters of a quire run of STEPS steps under precision."""
    dtype = {"f64": "F64", "f32": "F32"}[precision]
    init = os.path.join(tmp, f"init_{precision}.safetensors")
    final = os.path.join(tmp, f"final_{precision}.safetensors")
    dim = f"{settings['batch_dim']}={settings['batch']}"
    # The f32 run starts from the f64 draw rounded to its f32 masters.
    source = ["--seed", "0"] if precision == "f64" else ["--params", os.path.join(tmp, "init_f64.safetensors")]
    torch_autograd.run_quire(binary, tmp, "run", MAIN, "--entry", settings["objective"], "--dim", dim, "--precision", precision,
                             *source, "--params-out", init)
    out = torch_autograd.run_quire(binary, tmp, "train", MAIN, "--precision", precision, "--params", init, "--max-steps",
                             str(STEPS), "--run-dir", os.path.join(tmp, "run_" + precision), "--params-out", final)
    start = read_params(init, dtype, f"{precision} init", failures)
    end = read_params(final, dtype, f"{precision} final", failures)
    if sorted(end) != sorted(start):
        failures.append(f"{precision}: the final parameters are {sorted(end)}, the initial {sorted(start)}")
    for name, values in end.items():
        if name not in start:
            continue
        if values.shape != start[name].shape:
            failures.append(f"{precision}: {name} has shape {list(values.shape)}, initially {list(start[name].shape)}")
        elif not np.all(np.isfinite(values)):
            failures.append(f"{precision}: {name} is not finite after training")
        elif np.array_equal(values, start[name]) and np.any(start[name] != 0):
            failures.append(f"{precision}: {name} did not change in {STEPS} steps")
    print(f"quire train --precision {precision}: {STEPS} steps, {len(end)} parameters checked")
    if out.strip():
        print("  " + out.strip().splitlines()[-1])
    return start, end


# ---------------------------------------------------------------- PyTorch's side


def torch_train(torch, init, data, settings, dtype):
    """The final parameters of STEPS AdamW steps from init, as f64 arrays."""
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in init.items()}
    b = settings["batch"]
    per_epoch = len(data[0]) // b
    total = settings["epochs"] * per_epoch
    opt = torch.optim.AdamW(list(p.values()), lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                            eps=settings["eps"], weight_decay=settings["weight_decay"], foreach=False)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, hf_multiplier(settings["schedule"], total))
    loss = None
    for step in range(STEPS):
        k = step % per_epoch
        x, y = (torch.tensor(a[k * b : k * b + b], dtype=dtype) for a in data)
        opt.zero_grad()
        loss = torch_autograd.tutorial_loss(torch, p, x, y)
        loss.backward()
        if settings["clip"] is not None:
            torch.nn.utils.clip_grad_norm_(list(p.values()), settings["clip"], foreach=False)
        opt.step()
        schedule.step()
    print(f"torch {dtype}: {STEPS} steps of {total}, last loss {float(loss.detach()):.6g}")
    return {k: v.detach().to(torch.float64).numpy() for k, v in p.items()}


def compare(precision, got, want, tolerance, failures):
    worst = 0.0
    for name in want:
        rel = torch_autograd.relative_error(got[name], want[name])
        worst = max(worst, rel)
        print(f"{precision}:   {name:<14} max relative error {rel:.3e}")
    if tolerance is None:
        print(f"{precision}: worst {worst:.3e} (reported, not asserted)")
    else:
        print(f"{precision}: worst {worst:.3e} (tolerance {tolerance:g})")
        if not worst <= tolerance:
            failures.append(f"{precision}: the final parameters differ by {worst:.3e} relative")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    binary = os.path.abspath(ap.parse_args().quire)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = copy_tutorial(tmp)
        print("training run (shuffle removed): " + ", ".join(f"{k} = {v}" for k, v in settings.items()))
        runs = {p: quire_train(binary, tmp, settings, p, failures) for p in ("f64", "f32")}
        with np.load(os.path.join(tmp, settings["data"])) as f:
            data = (f["0"], f["1"])
    torch = import_torch()
    for precision, dtype, tolerance in (("f64", torch.float64, TOLERANCE_F64), ("f32", torch.float32, None)):
        start, end = runs[precision]
        want = torch_train(torch, start, data, settings, dtype)
        compare(precision, end, want, tolerance, failures)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
