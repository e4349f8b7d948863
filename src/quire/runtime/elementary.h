#pragma once
// quire's own exp and erf (elementary.inc): the reference interpreter's, and,
// through the same C source pasted into every compiled kernel, the native
// backend's, bit for bit. Accurate to below one ulp (elementary_test.cpp
// measures them against MPFR); not libm's, whose last bit depends on its
// version and which a compiled kernel cannot vectorize.

namespace quire::runtime {

double elementary_exp(double x);
double elementary_erf(double x);
/// libm's log1p and expm1, called from elementary.inc as a kernel calls them.
double elementary_log1p(double x);
double elementary_expm1(double x);
/// x > 20 ? x : log1p(elementary_exp(x)): F.softplus with beta 1 and threshold 20.
double elementary_softplus(double x);

/// elementary.inc's text: C that defines `static inline double quire_exp(double)`
/// and `quire_erf`, for a kernel's C source (which must include <math.h>,
/// <stdint.h> and <string.h> first and compile without contraction).
const char* elementary_c_source();

/// elementary_fast.inc's text: `quire_fast_erf`, `quire_fast_gelu`, their
/// windows and `quire_f32_doubt`, approximations with a rounding test that
/// give the reference's f32 results or say they cannot. It follows
/// elementary_c_source() and a definition of `quire_sqrt1_2`.
const char* elementary_fast_c_source();

}  // namespace quire::runtime
