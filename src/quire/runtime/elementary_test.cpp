// quire's exp and erf against MPFR: below one ulp everywhere they are tried,
// and the special values and range ends right.

#include "quire/runtime/elementary.h"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <cstdint>  // before mpfr.h: it declares the intmax_t functions only then
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace quire::runtime {
namespace {

/// |got − f(x)| in units of the last place of the double nearest f(x) (the
/// subnormals' fixed step below 2^-1022), f evaluated by MPFR at 256 bits.
double ulp_error(double got, double x, int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t)) {
  mpfr_t in, exact, diff;
  mpfr_inits2(256, in, exact, diff, static_cast<mpfr_ptr>(nullptr));
  mpfr_set_d(in, x, MPFR_RNDN);
  f(exact, in, MPFR_RNDN);
  double error = 0;
  if (mpfr_zero_p(exact)) {
    error = got == 0 ? 0 : std::numeric_limits<double>::infinity();
  } else if (std::isinf(got)) {
    // Right when f(x) rounds to it: |f(x)| ≥ 2^1024 − 2^970, the largest
    // double plus half its ulp (`in` is free again: x is in `exact`).
    mpfr_set_ui_2exp(diff, 1, 1024, MPFR_RNDN);
    mpfr_set_ui_2exp(in, 1, 970, MPFR_RNDN);
    mpfr_sub(diff, diff, in, MPFR_RNDN);
    const bool overflows = mpfr_cmpabs(exact, diff) >= 0 && (mpfr_sgn(exact) > 0) == (got > 0);
    error = overflows ? 0 : std::numeric_limits<double>::infinity();
  } else {
    const long exponent = std::max<long>(mpfr_get_exp(exact), -1021);  // exact ∈ [2^(e−1), 2^e)
    mpfr_sub_d(diff, exact, got, MPFR_RNDN);
    mpfr_abs(diff, diff, MPFR_RNDN);
    mpfr_mul_2si(diff, diff, 53 - exponent, MPFR_RNDN);  // in units of 2^(e−53)
    error = mpfr_get_d(diff, MPFR_RNDU);
  }
  mpfr_clears(in, exact, diff, static_cast<mpfr_ptr>(nullptr));
  return error;
}

std::vector<double> arguments(double lo, double hi, int count, const std::vector<double>& also) {
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> xs = also;
  for (int i = 0; i < count; ++i) xs.push_back(uniform(rng));
  // Small magnitudes of every exponent, both signs.
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  for (int e = -1074; e < 0; ++e)
    for (double sign : {1.0, -1.0}) xs.push_back(sign * std::ldexp(mantissa(rng), e));
  return xs;
}

/// The arguments next to `x`, a range's end: x itself and four doubles each side.
void around(std::vector<double>& xs, double x) {
  double below = x, above = x;
  xs.push_back(x);
  for (int i = 0; i < 4; ++i) {
    below = std::nextafter(below, -INFINITY);
    above = std::nextafter(above, INFINITY);
    xs.push_back(below);
    xs.push_back(above);
  }
}

/// Checks `ours` against `exact` at every argument: the worst error below one ulp.
void expect_within_one_ulp(double (*ours)(double), int (*exact)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t),
                           const std::vector<double>& xs) {
  double worst = 0;
  double worst_at = 0;
  for (double x : xs) {
    const double error = ulp_error(ours(x), x, exact);
    if (error > worst) {
      worst = error;
      worst_at = x;
    }
  }
  EXPECT_LT(worst, 1.0) << "at x = " << worst_at << " (" << std::hexfloat << worst_at << ")";
}

TEST(Elementary, ExpIsWithinOneUlpOfMpfr) {
  std::vector<double> ends;
  // The largest finite result, the overflow, the first subnormal results, the last nonzero one.
  for (double x : {709.782712893384, 709.8, -708.3964185322641, -745.1332191019411, -745.2, 0.0, 0.3465735902799727,
                   -0.3465735902799727, 1.0, -1.0})
    around(ends, x);
  expect_within_one_ulp(elementary_exp, mpfr_exp, arguments(-746.0, 710.0, 200000, ends));
}

TEST(Elementary, ErfIsWithinOneUlpOfMpfr) {
  std::vector<double> ends;
  for (double x : {0.84375, 1.25, 0x1.6db6ep+1, 6.0, 0x1p-28, 0x1p-1015})
    for (double sign : {1.0, -1.0}) around(ends, sign * x);
  expect_within_one_ulp(elementary_erf, mpfr_erf, arguments(-7.0, 7.0, 100000, ends));
}

TEST(Elementary, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(elementary_exp(0.0), 1.0);
  EXPECT_EQ(elementary_exp(-0.0), 1.0);
  EXPECT_EQ(elementary_exp(inf), inf);
  EXPECT_EQ(elementary_exp(-inf), 0.0);
  EXPECT_EQ(elementary_exp(710.0), inf);
  EXPECT_EQ(elementary_exp(-746.0), 0.0);
  EXPECT_EQ(elementary_exp(-745.0), 0x1p-1074) << "the smallest subnormal, rounded once";
  EXPECT_TRUE(std::isnan(elementary_exp(nan)));
  EXPECT_TRUE(std::isnan(elementary_exp(-nan)));

  EXPECT_EQ(elementary_erf(inf), 1.0);
  EXPECT_EQ(elementary_erf(-inf), -1.0);
  EXPECT_EQ(elementary_erf(6.0), 1.0);
  EXPECT_EQ(elementary_erf(-30.0), -1.0);
  EXPECT_EQ(elementary_erf(0.0), 0.0);
  EXPECT_TRUE(std::signbit(elementary_erf(-0.0)));
  EXPECT_EQ(elementary_erf(0x1p-1074), 0x1p-1074) << "2/√π · 2^-1074 rounds to 2^-1074";
  EXPECT_TRUE(std::isnan(elementary_erf(nan)));
  // Odd: erf(−x) = −erf(x) exactly.
  for (double x : {1e-300, 0.3, 0.84375, 1.0, 1.25, 2.5, 3.0, 5.9})
    EXPECT_EQ(elementary_erf(-x), -elementary_erf(x)) << x;
}

TEST(Elementary, TheCSourceDefinesBothFunctions) {
  const std::string c = elementary_c_source();
  EXPECT_NE(c.find("double quire_exp(double x)"), std::string::npos);
  EXPECT_NE(c.find("double quire_erf(double x)"), std::string::npos);
}

}  // namespace
}  // namespace quire::runtime
