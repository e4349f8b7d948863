#!/usr/bin/env python3
"""Precision analysis: time per site, against a plain run of the same program.

Generates towers of growing size, runs on each the chain of docs/precision.md

    quire calibrate FILE --entry tower --out env.json
    quire dump FILE --stage sensitivity --entry tower
    quire solve FILE --precision env.json --budget 1e-3 --held-out 0 --sites 5 --out r.json

and the peer, a plain f64 `quire run FILE --entry tower`, and prints a
Markdown table: the sites (as `quire calibrate` counts them), the seconds of
each step, µs per site, and the whole analysis as a multiple of one plain run.
Growth is fitted as the exponent k of time ∝ sites^k (1 is linear).

The families (one tower layer is h' = h + (1/layers)·tanh(h · w): five sites,
the product, the literal, tanh, the scaling and the residual sum):

  depth  layers grow at 8 elements per tensor (ℝ[r: 2, c: 4]), 50 layers per
         function, the functions called in sequence by the entry;
  width  1000 layers, the tensors grow (ℝ[r: 2, c: C], C = 2 … 32);
  flat   layers grow in one function (every layer a `let` of the entry).

The solve is also timed without `--out`, to separate the realization file's
cost.

Standard library only; run from anywhere:

    python3 bench/precision_scale.py --quire build/quire [--max-sites 100000] [--out raw.json] [--quick]
"""

import argparse
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
TUTORIAL = REPO / "examples" / "tutorial" / "07_train.qr"

SITES_PER_LAYER = 5
LAYERS_PER_FUNCTION = 50  # bounds a function's size: see the flat family for why


# ---------------------------------------------------------------------------
# The programs.


def layer_lines(i, step):
    """Layer i of a tower, h{i+1} from h{i}: five sites (the product, the literal, tanh, the scaling, the sum)."""
    return [f"  let a{i} = h{i} · w", f"  let h{i + 1} = h{i} + {step!r} * tanh(a{i})"]


def entry_lines(width):
    """The entry's signature and its weight, scaled so that a layer's product keeps |h|'s size at every width."""
    return [f"fn tower(x : ℝ[r: 2, c: {width}], u : ℝ[{width}, c: {width}]) -> ℝ[] =",
            f"  let w = {1 / math.sqrt(width)!r} * u"]


def chained_tower(layers, width, per_function=LAYERS_PER_FUNCTION):
    """`tower` calls ⌈layers / per_function⌉ functions in sequence; L = mean(h²).

    Each layer adds 1/layers of tanh(h · w): |h| stays within |x| + 1 and the
    sensitivities within a few orders of magnitude at every depth and width,
    so that the solver narrows most sites and the measurement accepts.
    """
    t, w, step = f"ℝ[r: 2, c: {width}]", f"ℝ[{width}, c: {width}]", 1 / layers
    lines, sizes = [], []
    left = layers
    while left > 0:
        sizes.append(min(per_function, left))
        left -= sizes[-1]
    for f, k in enumerate(sizes):
        lines.append(f"fn block{f}(h0 : {t}, w : {w}) -> {t} =")
        for i in range(k):
            lines += layer_lines(i, step)
        lines.append(f"  h{k}")
    lines += entry_lines(width)
    lines.append("  let g0 = x")
    for f in range(len(sizes)):
        lines.append(f"  let g{f + 1} = block{f}(g{f}, w)")
    lines.append(f"  mean(g{len(sizes)}^2)")
    return "\n".join(lines) + "\n"


def flat_tower(layers, width=4):
    """The same layers, every one a `let` of the entry itself."""
    lines = entry_lines(width) + ["  let h0 = x"]
    for i in range(layers):
        lines += layer_lines(i, 1 / layers)
    lines.append(f"  mean(h{layers}^2)")
    return "\n".join(lines) + "\n"


def plan(max_sites, quick):
    """[(family, name, layers, width, program text, repeats)]; the largest of a family runs once."""
    cases = []
    if quick:
        depth = [200, 400, 1000, 2000]
        widths, width_layers = [2, 4, 8], 200
        flat = [200, 400, 800]
    else:
        targets = [1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000]
        depth = [t // SITES_PER_LAYER for t in targets if t < max_sites] + [math.ceil(max_sites / SITES_PER_LAYER)]
        widths, width_layers = [2, 4, 8, 16, 32], 1000
        # One function of up to 2·10^4 sites: its analysis must stay linear too.
        flat = [250, 500, 1000, 2000, 4000]
    for i, n in enumerate(depth):
        cases.append(("depth", f"depth-{n}", n, 4, chained_tower(n, 4), 1 if i == len(depth) - 1 else 3))
    for i, c in enumerate(widths):
        name = f"width-{c}"
        cases.append(("width", name, width_layers, c, chained_tower(width_layers, c), 1 if i == len(widths) - 1 else 3))
    for i, n in enumerate(flat):
        cases.append(("flat", f"flat-{n}", n, 4, flat_tower(n), 1 if i == len(flat) - 1 else 3))
    return cases


# ---------------------------------------------------------------------------
# Timing.


class StepFailed(Exception):
    pass


def timed(cmd, cwd):
    """Runs cmd once: (wall seconds, CPU seconds, peak RSS in MB, stdout).

    A solve that finds nothing inside the budget exits 1 having done all its
    work: that is a result (recorded as not accepted), not a failure.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        refused = p.returncode == 1 and "no realization is inside the budget" in stdout
        if p.returncode != 0 and not refused:
            stderr = err.read().decode("utf-8", "replace")
            raise StepFailed(f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{stdout[-2000:]}{stderr[-2000:]}")
    # ru_maxrss is in kilobytes on Linux.
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def median_of(cmd, cwd, repeats):
    """The median wall and CPU time of `repeats` runs, the largest RSS, and the last run's stdout."""
    runs = [timed(cmd, cwd) for _ in range(repeats)]
    return {
        "wall_s": statistics.median(r[0] for r in runs),
        "cpu_s": statistics.median(r[1] for r in runs),
        "rss_mb": max(r[2] for r in runs),
        "walls": [r[0] for r in runs],
    }, runs[-1][3]


BENCH_SOLVE = ["--budget", "1e-3", "--held-out", "0", "--sites", "5"]
DEFAULT_SOLVE = ["--budget", "1e-3"]  # the solver's defaults: 4 held-out samples, θ = 1e-3


def analyse(quire, program, entry, dims, work, repeats, solve_flags=BENCH_SOLVE):
    """Times check, calibrate, sensitivity, solve and the plain run of one program."""
    env, real = work / "env.json", work / "r.json"
    dim_flags = [f for d in dims for f in ("--dim", d)]
    steps = {
        "check": [quire, "check", program],
        "calibrate": [quire, "calibrate", program, "--entry", entry, *dim_flags, "--out", env],
        "sensitivity": [quire, "dump", program, "--stage", "sensitivity", "--entry", entry, *dim_flags],
        "solve": [quire, "solve", program, "--precision", env, *solve_flags, "--out", real],
        # The same solve, its realization not written: what the file costs.
        "solve_no_out": [quire, "solve", program, "--precision", env, *solve_flags],
        "run": [quire, "run", program, "--entry", entry, *dim_flags],
    }
    result, outputs = {}, {}
    for step, cmd in steps.items():
        result[step], outputs[step] = median_of(cmd, work, repeats)
    m = re.search(r"calibrate: (\d+) sites", outputs["calibrate"])
    if not m:
        raise StepFailed(f"calibrate printed no site count:\n{outputs['calibrate'][:500]}")
    narrowed = re.search(r"sites\s+(\d+) decided, (\d+) stored away from f64", outputs["solve"])
    measured = re.search(r"measured\s+(\S+) .* after (\d+) widening rounds? — (.*)", outputs["solve"])
    return {
        "sites": int(m.group(1)),
        "solve_decided": int(narrowed.group(1)) if narrowed else None,
        "solve_narrowed": int(narrowed.group(2)) if narrowed else None,
        "solve_widening_rounds": int(measured.group(2)) if measured else None,
        "solve_verdict": measured.group(3).strip() if measured else None,
        "solve_accepted": "no realization is inside the budget" not in outputs["solve"],
        "steps": result,
        "analysis_s": sum(result[s]["wall_s"] for s in ("calibrate", "sensitivity", "solve")),
        "analysis_cpu_s": sum(result[s]["cpu_s"] for s in ("calibrate", "sensitivity", "solve")),
    }


def exponent(points):
    """Least-squares k of log t = k log n + c over [(n, t)]; None with fewer than 2 points."""
    pts = [(math.log(n), math.log(t)) for n, t in points if n > 0 and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


# ---------------------------------------------------------------------------
# The report.


def machine():
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"nproc": os.cpu_count(), "cpu": model, "load_1min": load, "python": platform.python_version()}


def us(seconds, sites):
    return 1e6 * seconds / sites


def narrowed(r):
    if not r["solve_accepted"]:
        return "nothing inside the budget"
    return f"{r['solve_narrowed']} of {r['solve_decided']}, {r['solve_widening_rounds']}"


def markdown(rows, tutorial):
    out = []
    head = ("| family | program | sites | elems/tensor | check s | calibrate s | sensitivity s | solve s | run s "
            "| calibrate µs/site | sensitivity µs/site | solve µs/site | analysis µs/site | analysis CPU µs/site "
            "| analysis / run "
            "| solve: narrowed, widening rounds |")
    out.append(head)
    out.append("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        s, n = r["steps"], r["sites"]
        out.append(
            f"| {r['family']} | {r['name']}{'' if r['repeats'] > 1 else ' (1 run)'} | {n} | {2 * r['width']} "
            f"| {s['check']['wall_s']:.3f} | {s['calibrate']['wall_s']:.3f} | {s['sensitivity']['wall_s']:.3f} "
            f"| {s['solve']['wall_s']:.3f} | {s['run']['wall_s']:.3f} "
            f"| {us(s['calibrate']['wall_s'], n):.1f} | {us(s['sensitivity']['wall_s'], n):.1f} "
            f"| {us(s['solve']['wall_s'], n):.1f} | {us(r['analysis_s'], n):.1f} | {us(r['analysis_cpu_s'], n):.1f} "
            f"| {r['analysis_s'] / s['run']['wall_s']:.1f} | {narrowed(r)} |")
    out.append("")
    out.append("Growth, time ∝ sites^k (least squares over the family; width: over elements per tensor):")
    out.append("")
    out.append("| family | calibrate k | sensitivity k | solve k | solve without --out k | analysis k | analysis CPU k "
               "| run k | analysis µs/site, max / min |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for fam in ("depth", "width", "flat"):
        rs = [r for r in rows if r["family"] == fam]
        if len(rs) < 2:
            continue
        x = (lambda r: 2 * r["width"]) if fam == "width" else (lambda r: r["sites"])
        ks = []
        for step in ("calibrate", "sensitivity", "solve", "solve_no_out"):
            ks.append(exponent([(x(r), r["steps"][step]["wall_s"]) for r in rs]))
        ks.append(exponent([(x(r), r["analysis_s"]) for r in rs]))
        ks.append(exponent([(x(r), r["analysis_cpu_s"]) for r in rs]))
        ks.append(exponent([(x(r), r["steps"]["run"]["wall_s"]) for r in rs]))
        per = [us(r["analysis_s"], r["sites"]) for r in rs]
        out.append(f"| {fam} | " + " | ".join("–" if k is None else f"{k:.2f}" for k in ks)
                   + f" | {max(per) / min(per):.2f} |")
    if tutorial:
        out.append("")
        for t in tutorial:
            s = t["steps"]
            out.append(
                f"Tutorial ({t['name']}): {t['sites']} sites; calibrate {s['calibrate']['wall_s']:.3f} s, "
                f"sensitivity {s['sensitivity']['wall_s']:.3f} s, solve {s['solve']['wall_s']:.3f} s: "
                f"the whole analysis {t['analysis_s']:.3f} s (median of {t['repeats']}); a plain run "
                f"{s['run']['wall_s']:.3f} s.")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quire", default="build/quire", help="the quire binary (default build/quire)")
    ap.add_argument("--max-sites", type=int, default=100000, help="the depth family's largest program (default 100000)")
    ap.add_argument("--out", help="also write the raw results here as JSON")
    ap.add_argument("--quick", action="store_true", help="a small sweep (under a minute) to check the script works")
    args = ap.parse_args()
    quire = str(pathlib.Path(args.quire).resolve())
    if not os.access(quire, os.X_OK):
        sys.exit(f"precision_scale: {args.quire}: not an executable (build quire first, or pass --quire)")

    started = time.perf_counter()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    info = machine()
    print(f"precision_scale: {info['nproc']} CPUs, {info['cpu']}, load {info['load_1min']:.2f}", file=sys.stderr)
    rows, tutorial, failures = [], [], []
    with tempfile.TemporaryDirectory(prefix="quire-bench-") as tmp:
        work = pathlib.Path(tmp)
        # The tutorial: solved as the towers are, then with the solver's defaults.
        for flags, how in ((BENCH_SOLVE, "solve " + " ".join(BENCH_SOLVE)), (DEFAULT_SOLVE, "solve --budget 1e-3")):
            t = analyse(quire, str(TUTORIAL), "loss", ["B=4"], work, 3, flags)
            t.update(name=f"07_train.qr --entry loss --dim B=4, {how}", repeats=3)
            tutorial.append(t)
            print(f"  tutorial ({how}): {t['sites']} sites, analysis {t['analysis_s']:.3f} s", file=sys.stderr)
        for family, name, layers, width, text, repeats in plan(args.max_sites, args.quick):
            program = work / f"{name}.qr"
            program.write_text(text, encoding="utf-8")
            try:
                r = analyse(quire, str(program), "tower", [], work, repeats)
            except StepFailed as e:
                failures.append({"name": name, "error": str(e)})
                print(f"  {name}: FAILED: {str(e)[:300]}", file=sys.stderr)
                continue
            r.update(family=family, name=name, layers=layers, width=width, repeats=repeats,
                     bytes=len(text.encode("utf-8")))
            rows.append(r)
            print(f"  {name}: {r['sites']} sites, analysis {r['analysis_s']:.2f} s "
                  f"({us(r['analysis_s'], r['sites']):.1f} µs/site), run {r['steps']['run']['wall_s']:.3f} s",
                  file=sys.stderr)
            program.unlink()
    elapsed = time.perf_counter() - started
    info["load_1min_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(markdown(rows, tutorial))
    for f in failures:
        print(f"\n{f['name']} FAILED: {f['error'][:300]}")
    print(f"\nThe sweep took {elapsed:.0f} s ({date}); load average {info['load_1min']:.2f} before, "
          f"{info['load_1min_after']:.2f} after.")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"date": date, "machine": info, "quire": quire, "elapsed_s": elapsed, "tutorial": tutorial,
                       "rows": rows, "failures": failures}, f, indent=2)
            f.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
