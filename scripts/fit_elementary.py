#!/usr/bin/env python3
"""The polynomial coefficients of src/quire/runtime/elementary_fast.inc.

Each fit is least squares, weighted by 1/f (relative error), on Chebyshev
nodes of its interval, computed at 60 digits and rounded to doubles; the
printed error is the largest relative error of the rounded coefficients over
4001 points of the interval (evaluated exactly; the kernels' own rounding
adds to it and is measured by runtime/elementary_fast_test.cpp).

    python3 scripts/fit_elementary.py     # needs mpmath (pip install mpmath)

The coefficients print lowest degree first, as hex floats.
"""

import mpmath as mp

mp.mp.dps = 60


def fit(f, lo, hi, degree, var):
    nodes = 6 * degree + 60
    xs = [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (k + mp.mpf(1) / 2) / nodes) for k in range(nodes)]
    a = mp.matrix(nodes, degree + 1)
    b = mp.matrix(nodes, 1)
    for i, x in enumerate(xs):
        fx = f(x)
        w = 1 / abs(fx)
        v = var(x)
        for j in range(degree + 1):
            a[i, j] = w * v**j
        b[i] = w * fx
    c = mp.qr_solve(a, b)[0]
    return [float(c[j]) for j in range(degree + 1)]


def worst_error(f, coeffs, lo, hi, var, points=4000):
    worst = mp.mpf(0)
    for k in range(points + 1):
        x = lo + (hi - lo) * mp.mpf(k) / points
        v = var(x)
        p = mp.mpf(0)
        for c in reversed(coeffs):
            p = p * v + mp.mpf(c)
        worst = max(worst, abs(p / f(x) - 1))
    return float(mp.log(worst, 2))


def erf_over_a(u):  # erf(√u)/√u, 2/√π at 0
    return mp.erf(mp.sqrt(u)) / mp.sqrt(u) if u else 2 / mp.sqrt(mp.pi)


half_ln2 = mp.log(2) / 2 * (1 + mp.mpf("1e-6"))  # a little past ln2/2, for the reduction's rounding
FITS = [
    ("exp(r), |r| <= ln2/2", mp.exp, -half_ln2, half_ln2, 10, lambda r: r),
    ("erf(a)/a in u = a^2, a <= 0.75", erf_over_a, mp.mpf(0), mp.mpf("0.5625"), 9, lambda u: u),
    ("erfcx(a) in t = (a - 4)/(a + 4), 0 <= a <= 6", lambda a: mp.erfc(a) * mp.exp(a * a), mp.mpf(0), mp.mpf(6), 15,
     lambda a: (a - 4) / (a + 4)),
]

if __name__ == "__main__":
    for name, f, lo, hi, degree, var in FITS:
        coeffs = fit(f, lo, hi, degree, var)
        print(f"{name}: degree {degree}, relative error 2^{worst_error(f, coeffs, lo, hi, var):.2f}")
        print("  " + ", ".join(c.hex() for c in coeffs))
