"""quire's float storage types (src/quire/runtime/float_types.h) against NumPy
and, where it is installed, ml_dtypes, bit for bit.

  - f16: all 2^16 patterns decoded, and 10^6 random f64 values (every exponent,
    plus values around f16's range with exact ties) rounded, against NumPy's
    float16, which rounds f64 to f16 in one step with ties to even.
  - bf16, fp8 e4m3fn, fp8 e5m2 (only if `import ml_dtypes` works): all patterns
    decoded, and 10^6 random values rounded. ml_dtypes converts an f64 through
    f32 (rounding twice), so the values given to it are exactly f32 ones, for
    which one-step and two-step rounding agree. e4m3 overflow is excluded:
    quire saturates to ±448 there (NVIDIA satfinite), ml_dtypes gives NaN.

NaNs compare by NaN-ness and sign only: quire returns canonical quiet NaNs,
NumPy and ml_dtypes keep payload bits.

Usage: float_types_reference.py --table PATH_TO_float_table
"""
import argparse
import subprocess
import sys

import numpy as np

SEED = 20240611
SAMPLES = 1_000_000


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def compare(self, what, inputs, got_bits, want_bits, dtype):
        """got_bits and want_bits are unsigned patterns of the float type `dtype`
        (np.float64 for decoded values): they agree if equal, or both NaN with
        the same sign."""
        uint = np.dtype(f"u{np.dtype(dtype).itemsize}")
        got_bits, want_bits = got_bits.astype(uint), want_bits.astype(uint)
        sign = uint.type(1 << (8 * uint.itemsize - 1))
        with np.errstate(invalid="ignore"):
            got_nan = np.isnan(got_bits.view(dtype).astype(np.float64))
            want_nan = np.isnan(want_bits.view(dtype).astype(np.float64))
        ok = (got_bits == want_bits) | (got_nan & want_nan & ((got_bits & sign) == (want_bits & sign)))
        bad = np.flatnonzero(~ok)
        self.passed += int(ok.sum())
        self.failed += len(bad)
        print(f"{what}: {int(ok.sum())} agree, {len(bad)} differ")
        for i in bad[:10]:
            print(f"  input {inputs[i]!r}: quire {int(got_bits[i]):#x}, reference {int(want_bits[i]):#x}")


def run_table(table, mode, type_name, values=None):
    data = None if values is None else np.ascontiguousarray(values, dtype="<f8").tobytes()
    r = subprocess.run([table, mode, type_name], input=data, capture_output=True, check=True)
    if mode == "decode":
        return np.frombuffer(r.stdout, dtype="<f8")
    return np.frombuffer(r.stdout, dtype="<u8")


def random_f64(rng, n, min_exp, max_exp, mantissa_bits):
    """Half any f64 bit pattern; half with exponents from below the type's smallest
    subnormal to above its largest finite, a quarter of those exact ties."""
    raw = rng.integers(0, 2**64, size=n // 2, dtype=np.uint64, endpoint=False)
    m = n - n // 2
    exponent = rng.integers(min_exp - mantissa_bits - 3, max_exp + 3, size=m).astype(np.int64)
    mantissa = rng.integers(0, 2**52, size=m, dtype=np.uint64)
    dropped = np.uint64(52 - mantissa_bits)
    ties = rng.random(m) < 0.25
    mantissa[ties] = ((mantissa[ties] >> dropped) << dropped) | (np.uint64(1) << (dropped - np.uint64(1)))
    sign = rng.integers(0, 2, size=m, dtype=np.uint64) << np.uint64(63)
    near = sign | ((exponent + 1023).astype(np.uint64) << np.uint64(52)) | mantissa
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0, 65520.0, -65520.0,
                         2.0**-24, 2.0**-25, -(2.0**-25), np.nextafter(2.0**-25, 1.0), 1 + 2.0**-11 + 2.0**-30])
    return np.concatenate([raw.view(np.float64), near.view(np.float64), specials])


def check_f16(table, rng, tally):
    patterns = np.arange(2**16, dtype=np.uint16)
    want = patterns.view(np.float16).astype(np.float64).view(np.uint64)
    got = run_table(table, "decode", "f16").view(np.uint64)
    tally.compare("f16 decode (all 2^16, numpy)", patterns, got, want, np.float64)

    x = random_f64(rng, SAMPLES, -14, 15, 10)
    with np.errstate(over="ignore", invalid="ignore"):
        want16 = x.astype(np.float16)
    got = run_table(table, "encode", "f16", x)
    tally.compare(f"f16 encode ({len(x)} random f64, numpy)", x, got, want16.view(np.uint16), np.float16)


def check_ml_dtypes(table, rng, tally, ml_dtypes):
    # (quire name, ml_dtypes type, storage bits, min_exp, max_exp, mantissa bits, saturates)
    types = [("bf16", ml_dtypes.bfloat16, 16, -126, 127, 7, False),
             ("fp8e4m3", ml_dtypes.float8_e4m3fn, 8, -6, 8, 3, True),
             ("fp8e5m2", ml_dtypes.float8_e5m2, 8, -14, 15, 2, False)]
    for name, mltype, bits, min_exp, max_exp, mbits, saturates in types:
        uint = np.uint16 if bits == 16 else np.uint8
        patterns = np.arange(2**bits, dtype=np.uint64).astype(uint)
        with np.errstate(invalid="ignore"):
            want = patterns.view(mltype).astype(np.float64).view(np.uint64)
        got = run_table(table, "decode", name).view(np.uint64)
        tally.compare(f"{name} decode (all 2^{bits}, ml_dtypes)", patterns, got, want, np.float64)

        # Exactly-f32 values: ml_dtypes rounds f64 → f32 → type.
        with np.errstate(over="ignore", invalid="ignore"):
            x = random_f64(rng, SAMPLES, min_exp, max_exp, mbits).astype(np.float32).astype(np.float64)
        if saturates:
            keep = ~(np.abs(x) > 464.0)  # 448 + half ulp; beyond it quire gives ±448, ml_dtypes NaN
            print(f"{name}: {int((~keep).sum())} overflowing inputs excluded (quire saturates)")
            x = x[keep]
        with np.errstate(over="ignore", invalid="ignore"):
            wantx = x.astype(np.float32).astype(mltype)
        got = run_table(table, "encode", name, x)
        tally.compare(f"{name} encode ({len(x)} random f32-exact values, ml_dtypes)", x, got, wantx.view(uint), mltype)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True, help="the float_table driver executable")
    args = parser.parse_args()
    rng = np.random.default_rng(SEED)
    tally = Tally()
    check_f16(args.table, rng, tally)
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    if ml_dtypes is None:
        print("ml_dtypes not installed: bf16 and fp8 comparison SKIPPED")
    else:
        print(f"ml_dtypes {ml_dtypes.__version__}: comparing bf16, fp8 e4m3fn, fp8 e5m2")
        check_ml_dtypes(args.table, rng, tally, ml_dtypes)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
