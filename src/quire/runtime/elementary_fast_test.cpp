// elementary_fast.inc's shortcuts against the reference: wherever
// quire_f32_doubt clears a result, it rounds to the reference's f32, over a
// sweep of every f32 (all 2^32 of them with QUIRE_EXHAUSTIVE=1 in the
// environment), doubles that are not floats, and the special values; the
// approximations' distance from the reference is the documented one; and
// the doubt is rare on a network's typical arguments, or the shortcut would
// be no shortcut.

#include <gtest/gtest.h>
#include <math.h>    // NOLINT: the .inc files are C as well, and use the C names
#include <stdint.h>  // NOLINT
#include <string.h>  // NOLINT

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quire/runtime/kernels.h"

namespace quire::runtime {
namespace {

// The kernels' C, compiled here as C++ (as runtime/elementary.cpp does).
const double quire_sqrt1_2 = M_SQRT1_2;
#include "quire/runtime/elementary.inc"
#include "quire/runtime/elementary_fast.inc"

uint32_t f32_bits(double x) { return std::bit_cast<uint32_t>(static_cast<float>(x)); }
double from_f32_bits(uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); }

struct Shortcut {
  const char* name;
  double (*fast)(double);
  double (*window)(double);
  double (*reference)(double);
};

const Shortcut kShortcuts[] = {
    {"erf", [](double x) { return quire_fast_erf(x); }, [](double x) { return quire_fast_erf_window(x); },
     [](double x) { return apply_unary(UnaryOp::Erf, x); }},
    {"gelu", [](double x) { return quire_fast_gelu(x); }, [](double x) { return quire_fast_gelu_window(x); },
     [](double x) { return apply_unary(UnaryOp::Gelu, x); }},
};

/// What a sweep found: arguments tried, in doubt, and wrongly cleared (the
/// first few named), and the largest relative distance of a cleared
/// approximation from the reference.
struct Sweep {
  int64_t tried = 0;
  int64_t in_doubt = 0;
  int64_t wrong = 0;
  double worst = 0;
  std::string first_wrong;

  void check(const Shortcut& s, double x) {
    ++tried;
    const double v = s.fast(x);
    if (quire_f32_doubt(v, s.window(x))) {
      ++in_doubt;
      return;
    }
    const double r = s.reference(x);
    if (f32_bits(v) != f32_bits(r)) {
      if (++wrong <= 4)
        first_wrong += std::string(first_wrong.empty() ? "" : ", ") + s.name + "(" + std::to_string(x) + ")";
      return;
    }
    if (r != 0 && std::isfinite(r)) worst = std::max(worst, std::fabs(v - r) / std::fabs(r));
  }
};

TEST(ElementaryFast, EveryClearedResultRoundsToTheReferencesFloatOverASweepOfEveryF32) {
  // 2^20 arguments spread over all 2^32 float bit patterns (and the next
  // float's neighbours, so that runs of consecutive floats are tried too);
  // QUIRE_EXHAUSTIVE=1 tries every one of the 2^32 (about two minutes).
  const char* exhaustive = std::getenv("QUIRE_EXHAUSTIVE");
  const bool every = exhaustive && std::string(exhaustive) == "1";
  for (const Shortcut& s : kShortcuts) {
    Sweep sweep;
    if (every) {
      for (uint64_t b = 0; b < (uint64_t{1} << 32); ++b) sweep.check(s, from_f32_bits(static_cast<uint32_t>(b)));
    } else {
      for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 16381)
        for (uint32_t next = 0; next < 4; ++next) sweep.check(s, from_f32_bits(static_cast<uint32_t>(b + next)));
    }
    SCOPED_TRACE(s.name);
    EXPECT_EQ(sweep.wrong, 0) << sweep.first_wrong;
    // NaN patterns, infinities and the results outside f32's normal range
    // are in doubt by rule; the rest mostly not.
    EXPECT_LT(sweep.in_doubt, sweep.tried * 3 / 4);
    RecordProperty(std::string(s.name) + "_in_doubt", std::to_string(sweep.in_doubt) + " of " +
                                                          std::to_string(sweep.tried));
  }
}

TEST(ElementaryFast, TheApproximationsAreWithinTheDocumentedDistanceOfTheReference) {
  // erf everywhere, gelu where the reference's own sum 1 + erf is accurate
  // (x ≥ −2; below, the window widens with the reference's error instead):
  // 2^-48 is what elementary_fast.inc states, 2^-44 what its windows allow.
  Sweep erf, gelu;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    const double x = from_f32_bits(static_cast<uint32_t>(b));
    erf.check(kShortcuts[0], x);
    if (x >= -2.0) gelu.check(kShortcuts[1], x);
  }
  EXPECT_EQ(erf.wrong + gelu.wrong, 0) << erf.first_wrong << gelu.first_wrong;
  EXPECT_LT(erf.worst, std::ldexp(1.0, -48));
  EXPECT_LT(gelu.worst, std::ldexp(1.0, -48));
  EXPECT_GT(erf.worst, 0.0) << "the approximation is not the reference";
}

TEST(ElementaryFast, DoublesThatAreNotFloatsAndTheSpecialValuesRoundAsTheReference) {
  std::mt19937_64 rng(20261202);
  std::vector<double> xs = {0.0,
                            -0.0,
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN(),
                            -std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::denorm_min(),
                            -std::numeric_limits<double>::min(),
                            0.75,
                            std::nextafter(0.75, 0.0),
                            6.0,
                            std::nextafter(6.0, 0.0),
                            -6.0 / M_SQRT1_2,
                            1e300,
                            -1e300};
  std::uniform_real_distribution<double> wide(-12.0, 12.0);
  std::normal_distribution<double> normal(0.0, 1.5);
  for (int i = 0; i < 200000; ++i) xs.push_back(wide(rng));
  for (int i = 0; i < 200000; ++i) xs.push_back(normal(rng));
  for (int e = -1074; e < 128; ++e) xs.push_back(-std::ldexp(1.3, e));
  for (const Shortcut& s : kShortcuts) {
    Sweep sweep;
    for (double x : xs) sweep.check(s, x);
    EXPECT_EQ(sweep.wrong, 0) << sweep.first_wrong;
  }
}

TEST(ElementaryFast, TheRoundingTestDoubtsNearAMidpointAndOutsideTheNormalFloats) {
  const double one_plus_half_ulp = 1.0 + std::ldexp(1.0, -24);  // the midpoint between 1 and the next float
  const double ulp = std::ldexp(1.0, -52);                        // of a double in [1, 2)
  EXPECT_TRUE(quire_f32_doubt(one_plus_half_ulp, QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(one_plus_half_ulp + 512 * ulp, QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(one_plus_half_ulp - 512 * ulp, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(one_plus_half_ulp + 513 * ulp, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(one_plus_half_ulp - 513 * ulp, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(1.0, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(-1.0, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(0.0, QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(-0.0, QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(1.0, std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(quire_f32_doubt(std::ldexp(1.5, -127), QUIRE_FAST_WINDOW)) << "an f32 subnormal";
  EXPECT_FALSE(quire_f32_doubt(std::ldexp(1.5, -126), QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(std::ldexp(1.5, 127), QUIRE_FAST_WINDOW));
  EXPECT_FALSE(quire_f32_doubt(std::ldexp(1.5, 126), QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(std::numeric_limits<double>::infinity(), QUIRE_FAST_WINDOW));
  EXPECT_TRUE(quire_f32_doubt(std::numeric_limits<double>::quiet_NaN(), QUIRE_FAST_WINDOW));
  // A midpoint in another binade, and one's mirror image below zero.
  EXPECT_TRUE(quire_f32_doubt(-std::ldexp(one_plus_half_ulp, -40), QUIRE_FAST_WINDOW));
}

TEST(ElementaryFast, OnANetworksTypicalArgumentsFewResultsAreInDoubt) {
  // Standard normal arguments, as a normalized layer gives the GELU: at
  // most one in 2^15 in doubt (measured: about one in 2^19), so that a
  // block of 256 is run twice about once in a hundred blocks or less.
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shortcut& s : kShortcuts) {
    Sweep sweep;
    for (int i = 0; i < (1 << 20); ++i) sweep.check(s, normal(rng));
    SCOPED_TRACE(s.name);
    EXPECT_EQ(sweep.wrong, 0) << sweep.first_wrong;
    EXPECT_LE(sweep.in_doubt, sweep.tried >> 15);
  }
}

// exp beside erf: over the GELU gradient's pairs, u = round_f32(x·√½) and w
// = round_f32(−½·round_f32(x²)) for a sweep of f32 x (special values among
// them), every cleared result rounds to the reference exp's float, the
// approximation is within its documented 2^-50 of it, and few are in doubt
// on a layer's typical arguments.
TEST(ElementaryFast, ExpBesideErfRoundsAsTheReferenceOnTheGeluGradientsArguments) {
  const float half_sqrt2 = static_cast<float>(M_SQRT1_2);
  auto pair = [&](float x) {
    return std::make_pair(static_cast<double>(x * half_sqrt2), static_cast<double>(-0.5f * (x * x)));
  };
  int64_t tried = 0, in_doubt = 0, wrong = 0;
  double worst = 0;
  auto check = [&](float x) {
    const auto [u, w] = pair(x);
    ++tried;
    const double v = quire_fast_exp_near(u, w);
    if (quire_f32_doubt(v, quire_fast_exp_near_window(u, w))) {
      ++in_doubt;
      return;
    }
    const double r = apply_unary(UnaryOp::Exp, w);
    if (f32_bits(v) != f32_bits(r)) {
      ADD_FAILURE() << "x = " << x << ": " << v << " against the reference's " << r;
      ++wrong;
      return;
    }
    worst = std::max(worst, std::fabs(v - r) / r);
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32) && wrong < 4; b += 4099)
    check(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 8.4f, 8.5f, 8.6f, -13.2f, 13.3f, 20.0f})
    check(x);
  EXPECT_EQ(wrong, 0);
  EXPECT_LT(worst, std::ldexp(1.0, -49));
  EXPECT_GT(worst, 0.0) << "the approximation is not the reference";
  EXPECT_LT(in_doubt, tried * 3 / 4);

  // Standard normal x: at most one in 2^15 in doubt, as for erf and gelu.
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  tried = in_doubt = 0;
  for (int i = 0; i < (1 << 20); ++i) check(normal(rng));
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(in_doubt, tried >> 15);
}

// Where w is not close to −u², the shortcut does not hold and every result
// is in doubt, whatever it computed; NaN as well.
TEST(ElementaryFast, ExpBesideAnUnrelatedErfIsAlwaysInDoubt) {
  for (const auto& [u, w] : std::vector<std::pair<double, double>>{
           {1.0, 0.5}, {1.0, -1.01}, {0.0, -0.01}, {7.0, -49.0}, {std::nan(""), -1.0}, {1.0, std::nan("")}}) {
    EXPECT_TRUE(quire_f32_doubt(quire_fast_exp_near(u, w), quire_fast_exp_near_window(u, w))) << u << ", " << w;
  }
  // Just inside the bound, and the clamp at 6 does not stop it: exp(−36.0001).
  EXPECT_EQ(quire_fast_exp_near_window(1.0, -1.0 + std::ldexp(1.0, -11)), QUIRE_FAST_WINDOW);
  EXPECT_EQ(quire_fast_exp_near_window(6.5, -36.0001), QUIRE_FAST_WINDOW);
  EXPECT_NEAR(quire_fast_exp_near(6.5, -36.0001) / std::exp(-36.0001), 1.0, 1e-14);
}

}  // namespace
}  // namespace quire::runtime
