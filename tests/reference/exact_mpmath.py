"""quire's exact reference (`quire run --precision exact --bits 128`) against mpmath at 128 bits.

A small program applies exp, log, erf, tanh, sqrt, pow, sigmoid, gelu,
gelu_tanh, silu, logsumexp and mean to inputs given in an .npz; mpmath
(mp.prec = 128) evaluates the same expressions, step by step as kernels.h
states them, on the same doubles (each converted exactly), with every literal
of the program (and of the prelude's gelu_tanh) read as its decimal. Every printed digit
string must agree with mpmath's value to within 2^-120 relative (the inputs
keep gelu's cancellation, 1 + erf(x/√2) for negative x, small enough that
128 bits leave more than 120 correct). Exits 1 on any disagreement.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import mpmath
import numpy as np
from mpmath import mp, mpf

TOLERANCE = mpf(2) ** -120

PROGRAM = """\
fn f(x : ℝ[n: 6], y : ℝ[n: 6]) -> (ℝ[n: 6], ℝ[n: 6], ℝ[n: 6], ℝ[n: 6], ℝ[n: 6], ℝ[n: 6],
                                   ℝ[n: 6], ℝ[n: 6], ℝ[n: 6], ℝ[n: 6], ℝ[], ℝ[]) =
  (exp(x), log(y), erf(x), tanh(x), sqrt(y), y ^ x,
   sigmoid(x), gelu(x), gelu_tanh(x), silu(x), logsumexp(x), mean(y))
"""

X = np.array([-1.9, -0.7, -0.0, 0.3, 1.25, 2.0], dtype=np.float64)
Y = np.array([0.1, 0.5, 1.0, 2.0, 3.7, 10.0], dtype=np.float64)


def sigmoid(x):
    return 1 / (1 + mpmath.exp(-x))


def expected():
    """Each result leaf as a list of mpf values, in the program's order."""
    xs = [mpf(float(v)) for v in X]
    ys = [mpf(float(v)) for v in Y]
    sqrt2 = mpmath.sqrt(2)
    # `gelu_tanh` in a program is the prelude's (nn.qr), whose k is the literal
    # 0.7978845608028654; the exact reference reads literals as their decimals.
    k = mpf("0.7978845608028654")
    c = mpf("0.044715")
    m = max(xs)
    lse = m + mpmath.log(_sum([mpmath.exp(x - m) for x in xs]))
    return [
        [mpmath.exp(x) for x in xs],
        [mpmath.log(y) for y in ys],
        [mpmath.erf(x) for x in xs],
        [mpmath.tanh(x) for x in xs],
        [mpmath.sqrt(y) for y in ys],
        [y**x for x, y in zip(xs, ys)],
        [sigmoid(x) for x in xs],
        [mpf("0.5") * x * (1 + mpmath.erf(x / sqrt2)) for x in xs],
        [mpf("0.5") * x * (1 + mpmath.tanh(k * (x + c * x * x * x))) for x in xs],
        [x * sigmoid(x) for x in xs],
        [lse],
        [_sum(ys) / len(ys)],
    ]


def _sum(terms):
    """Left to right from +0, each step rounded at mp.prec (the kernels' fold)."""
    acc = mpf(0)
    for t in terms:
        acc = acc + t
    return acc


def parse(output):
    """{leaf index: [digit strings]} from `result.K : exact(128) = [a, b, …]` lines."""
    leaves = {}
    for line in output.splitlines():
        m = re.fullmatch(r"result\.(\d+) : exact\(128\) = \[?([^\]]*)\]?", line.strip())
        if not m:
            raise ValueError(f"unexpected output line: {line!r}")
        leaves[int(m.group(1))] = [s.strip() for s in m.group(2).split(",")]
    return leaves


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quire", required=True, help="the quire binary")
    args = parser.parse_args()
    mp.prec = 128
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "exact.qr")
        with open(program, "w", encoding="utf-8") as f:
            f.write(PROGRAM)
        inputs = os.path.join(tmp, "inputs.npz")
        np.savez(inputs, x=X, y=Y)
        run = subprocess.run(
            [args.quire, "run", program, "--entry", "f", "--precision", "exact", "--bits", "128", "--inputs", inputs],
            capture_output=True, text=True)
        if run.returncode != 0:
            print(f"quire failed ({run.returncode}):\n{run.stdout}{run.stderr}", file=sys.stderr)
            return 1
    got = parse(run.stdout)
    want = expected()
    names = ["exp", "log", "erf", "tanh", "sqrt", "pow", "sigmoid", "gelu", "gelu_tanh", "silu", "logsumexp", "mean"]
    failures = 0
    worst = mpf(0)
    for k, (name, values) in enumerate(zip(names, want)):
        digits = got.get(k)
        if digits is None or len(digits) != len(values):
            print(f"{name}: expected {len(values)} values, quire printed {digits}", file=sys.stderr)
            failures += 1
            continue
        for i, (text, ref) in enumerate(zip(digits, values)):
            value = mpf(text)
            rel = abs(value - ref) / abs(ref) if ref != 0 else abs(value)
            worst = max(worst, rel)
            if rel > TOLERANCE:
                print(f"{name}[{i}]: quire {text}, mpmath {mpmath.nstr(ref, 40)}, relative {mpmath.nstr(rel, 3)}",
                      file=sys.stderr)
                failures += 1
    count = sum(len(v) for v in want)
    if failures:
        print(f"{failures} of {count} values disagree beyond 2^-120", file=sys.stderr)
        return 1
    print(f"{count} values agree with mpmath at 128 bits; worst relative difference "
          f"{mpmath.nstr(worst, 3)} (2^{mpmath.nstr(mpmath.log(worst, 2), 4) if worst > 0 else '-inf'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
