#include "quire/runtime/random.h"
#include "quire/runtime/philox_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <bit>
#include <set>
#include <vector>
#include <stdexcept>

namespace quire::runtime {

namespace {

struct Moments {
  double mean = 0, variance = 0;
};

Moments moments(const RealStorage& xs) {
  Moments m;
  for (double x : xs) m.mean += x;
  m.mean /= static_cast<double>(xs.size());
  for (double x : xs) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(xs.size() - 1);
  return m;
}

/// Checks the sample mean and variance of `xs` against the population's,
/// each within 5 standard errors. `kurtosis` (E[(x-μ)^4]/σ^4) sizes the
/// standard error of the sample variance: sqrt((κ - 1) / n) · σ².
void expect_moments(const RealStorage& xs, double mean, double variance, double kurtosis) {
  const double n = static_cast<double>(xs.size());
  const Moments m = moments(xs);
  EXPECT_NEAR(m.mean, mean, 5 * std::sqrt(variance / n));
  EXPECT_NEAR(m.variance, variance, 5 * std::sqrt((kurtosis - 1) / n) * variance);
}

constexpr int64_t kDraws = 100000;

}  // namespace

TEST(Random, KeyFromSeedSplitsTheWords) {
  EXPECT_EQ(key_from_seed(0x0123456789abcdefull), (Key{0x89abcdef, 0x01234567}));
}

TEST(Random, Fnv1aMatchesPublishedValues) {
  // Reference values of the FNV-1a 64-bit test suite (Fowler/Noll/Vo).
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(Random, DeriveKeyFollowsTheDocumentedFormula) {
  const Key base = key_from_seed(42);
  const uint64_t h = fnv1a64("blocks.proj.w");
  const auto w = philox4x32_10({static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32), 0, 0x51EED001}, {42, 0});
  EXPECT_EQ(derive_key(base, "blocks.proj.w"), (Key{w[0], w[1]}));
}

TEST(Random, DifferentPathsGiveDifferentKeys) {
  const Key base = key_from_seed(7);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const char* path : {"w", "b", "blocks.proj.w", "blocks.proj.b", "blocks.0.w", "blocks.1.w", ""}) {
    const Key k = derive_key(base, path);
    EXPECT_TRUE(seen.insert({k.k0, k.k1}).second) << path;
    EXPECT_EQ(derive_key(base, path), k) << "not deterministic: " << path;
  }
  EXPECT_NE(derive_key(key_from_seed(7), "w"), derive_key(key_from_seed(8), "w"));
}

TEST(Random, SplitKeysDifferFromEachOtherAndTheParent) {
  const Key k = key_from_seed(1234);
  const auto [a, b] = split_key(k);
  EXPECT_NE(a, b);
  EXPECT_NE(a, k);
  EXPECT_NE(b, k);
  const auto w = philox4x32_10({0, 0, 0, 0x5EED5EED}, {k.k0, k.k1});
  EXPECT_EQ(a, (Key{w[0], w[1]}));
  EXPECT_EQ(b, (Key{w[2], w[3]}));
  EXPECT_EQ(split_key(k), split_key(k));
}

TEST(Random, CopyKeysFollowTheDocumentedFormulaAndDifferByCopy) {
  const Key k = key_from_seed(1234);
  std::set<std::pair<uint32_t, uint32_t>> seen{{k.k0, k.k1}};
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{0x100000003}}) {
    const Key c = copy_key(k, i);
    const auto w = philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0xC0B1E5ED}, {k.k0, k.k1});
    EXPECT_EQ(c, (Key{w[0], w[1]})) << i;
    EXPECT_TRUE(seen.insert({c.k0, c.k1}).second) << i;
  }
  // Not split_key's halves: a stack's copies and a split draw apart.
  EXPECT_NE(copy_key(k, 0), split_key(k).first);
}

TEST(Random, BlockDrawsAreTheElementFormulas) {
  // Whole tensors are drawn sixteen elements at a time (a Bernoulli tensor in
  // runs of 4096); each element must be the formula's, across block and run
  // boundaries and for a partial last block.
  for (const Key k : {Key{0, 0}, key_from_seed(42), Key{0xffffffffu, 0x80000001u}}) {
    for (int64_t n : {1, 15, 16, 17, 37, 1000, 4096 + 37, 8193}) {
      const Tensor u = draw_uniform(k, {n}, -2.0, 3.0);
      const Tensor z = draw_normal(k, {n}, 0.5, 2.0);
      const Tensor b = draw_bernoulli(k, {n}, 0.3);
      for (int64_t i = 0; i < n; ++i) {
        const auto at = static_cast<uint64_t>(i);
        ASSERT_EQ(std::bit_cast<uint64_t>(u.reals[static_cast<size_t>(i)]),
                  std::bit_cast<uint64_t>(uniform_at(k, at, -2.0, 3.0)))
            << n << " " << i;
        ASSERT_EQ(std::bit_cast<uint64_t>(z.reals[static_cast<size_t>(i)]), std::bit_cast<uint64_t>(normal_at(k, at, 0.5, 2.0)))
            << n << " " << i;
        ASSERT_EQ(b.ints[static_cast<size_t>(i)], bernoulli_at(k, at, 0.3) ? 1 : 0) << n << " " << i;
      }
    }
  }
}

TEST(Random, EveryBlockPathIsPhilox) {
  // Each path this CPU has (QUIRE_ISA aside: block_on names it), against
  // philox4x32_10 word for word, with a block that crosses 2^32 (the high
  // counter word carries).
  using namespace philox_blocks;
  int ran = 0;
  for (Path p : {Path::Portable, Path::Avx2, Path::Avx512}) {
    if (!available(p)) continue;
    ++ran;
    for (const Key k : {Key{0, 0}, key_from_seed(42), Key{0xffffffffu, 0x80000001u}})
      for (uint64_t first : {uint64_t{0}, uint64_t{17}, uint64_t{0xfffffff8u}, uint64_t{0x123456789abcull}})
        for (uint32_t stream : {1u, 3u}) {
          Words w;
          block_on(p, k.k0, k.k1, first, stream, w);
          for (size_t l = 0; l < kLanes; ++l) {
            const uint64_t i = first + l;
            const auto want = philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, stream},
                                            {k.k0, k.k1});
            for (size_t j = 0; j < 4; ++j)
              ASSERT_EQ(w.w[j][l], want[j]) << path_name(p) << " first " << first << " lane " << l << " word " << j;
          }
        }
  }
  EXPECT_GE(ran, 1);
}

TEST(Random, BlocksDrawnSideBySideAreEachBlocksWords) {
  // blocks_on with 1 to 9 blocks (the AVX-512 path's groups of four and the
  // blocks left over) on each path: block b is block_on at first + 16·b.
  using namespace philox_blocks;
  const Key k = key_from_seed(7);
  for (Path p : {Path::Portable, Path::Avx2, Path::Avx512}) {
    if (!available(p)) continue;
    for (size_t count = 1; count <= 9; ++count)
      for (uint64_t first : {uint64_t{0}, uint64_t{0xffffffc0u}}) {
        std::vector<Words> got(count);
        blocks_on(p, k.k0, k.k1, first, 3u, got.data(), count);
        for (size_t b = 0; b < count; ++b) {
          Words want;
          block_on(Path::Portable, k.k0, k.k1, first + b * kLanes, 3u, want);
          for (size_t j = 0; j < 4; ++j)
            for (size_t l = 0; l < kLanes; ++l)
              ASSERT_EQ(got[b].w[j][l], want.w[j][l]) << path_name(p) << " count " << count << " block " << b;
        }
      }
  }
}

TEST(Random, BernoulliDrawsAreTheFormulaAtEveryProbability) {
  // The integer test bits53 < ⌈p·2^53⌉ against uniform01 < p, at the ends
  // and where p·2^53 is and is not an integer; whole tensors and runs.
  const Key k = key_from_seed(5);
  for (double p : {0.0, 1.0, 0.5, 0.3, 0.9f * 1.0, std::nextafter(0.5, 0.0), std::ldexp(1.0, -53), 1e-300}) {
    const Tensor b = draw_bernoulli(k, {1000}, p);
    std::vector<uint8_t> run(993);
    draw_bernoulli_run(k, 7, 993, p, run.data());
    for (int64_t i = 0; i < 1000; ++i) {
      const bool want = bernoulli_at(k, static_cast<uint64_t>(i), p);
      ASSERT_EQ(b.ints[static_cast<size_t>(i)], want ? 1 : 0) << p << " " << i;
      if (i >= 7) {
        ASSERT_EQ(run[static_cast<size_t>(i - 7)], want ? 1 : 0) << p << " " << i;
      }
    }
  }
}

TEST(Random, ElementsFollowTheDocumentedFormula) {
  const Key k{0xdeadbeef, 0x12345678};
  const uint64_t i = 0x100000005ull;  // exercises the high counter word
  const auto wu = philox4x32_10({5, 1, 0, 1}, {k.k0, k.k1});
  EXPECT_EQ(uniform01_at(k, i), std::ldexp(static_cast<double>((uint64_t{wu[0]} << 21) ^ (wu[1] >> 11)), -53));
  const auto wn = philox4x32_10({5, 1, 0, 2}, {k.k0, k.k1});
  const double u1 = std::ldexp(static_cast<double>(((uint64_t{wn[0]} << 21) ^ (wn[1] >> 11)) + 1), -53);
  const double u2 = std::ldexp(static_cast<double>((uint64_t{wn[2]} << 21) ^ (wn[3] >> 11)), -53);
  EXPECT_EQ(standard_normal_at(k, i), std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
}

TEST(Random, SameKeySameBitsAndShapeIndependence) {
  const Key k = key_from_seed(99);
  const Tensor a = draw_normal(k, {3, 4}, 0, 1);
  const Tensor b = draw_normal(k, {3, 4}, 0, 1);
  EXPECT_EQ(a.reals, b.reals);
  // An element's value depends only on its flat index, not on the shape.
  const Tensor flat = draw_normal(k, {12}, 0, 1);
  EXPECT_EQ(a.reals, flat.reals);
  EXPECT_NE(draw_normal(key_from_seed(100), {3, 4}, 0, 1).reals, a.reals);
  EXPECT_EQ(draw_uniform(k, {5}, 0, 1).reals, draw_uniform(k, {5}, 0, 1).reals);
  EXPECT_EQ(draw_bernoulli(k, {5}, 0.5).ints, draw_bernoulli(k, {5}, 0.5).ints);
}

TEST(Random, UniformMomentsAndBounds) {
  const Tensor t = draw_uniform(key_from_seed(1), {kDraws}, -2.0, 3.0);
  ASSERT_EQ(t.kind, ElemKind::Real);
  for (double x : t.reals) {
    ASSERT_GE(x, -2.0);
    ASSERT_LE(x, 3.0);
  }
  // U(a, b): mean (a+b)/2, variance (b-a)²/12, kurtosis 9/5.
  expect_moments(t.reals, 0.5, 25.0 / 12.0, 1.8);
  const Tensor u = draw_uniform(key_from_seed(2), {kDraws}, 0.0, 1.0);
  for (double x : u.reals) {
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(Random, NormalMoments) {
  const Tensor t = draw_normal(key_from_seed(3), {kDraws}, 1.5, 2.0);
  expect_moments(t.reals, 1.5, 4.0, 3.0);
  for (double x : t.reals) ASSERT_TRUE(std::isfinite(x));
}

TEST(Random, BernoulliMomentsAndKind) {
  const double p = 0.3;
  const Tensor t = draw_bernoulli(key_from_seed(4), {kDraws}, p);
  ASSERT_EQ(t.kind, ElemKind::Bool);
  std::vector<double> xs;
  for (int64_t v : t.ints) {
    ASSERT_TRUE(v == 0 || v == 1);
    xs.push_back(static_cast<double>(v));
  }
  // Bernoulli(p): variance p(1-p), kurtosis (1 - 3p(1-p)) / (p(1-p)).
  const double var = p * (1 - p);
  expect_moments(xs, p, var, (1 - 3 * var) / var);
  for (int64_t v : draw_bernoulli(key_from_seed(5), {100}, 0.0).ints) EXPECT_EQ(v, 0);
  for (int64_t v : draw_bernoulli(key_from_seed(5), {100}, 1.0).ints) EXPECT_EQ(v, 1);
}

TEST(Random, RejectsBadArguments) {
  const Key k = key_from_seed(0);
  EXPECT_THROW(draw_bernoulli(k, {2}, 1.5), std::invalid_argument);
  EXPECT_THROW(draw_bernoulli(k, {2}, -0.1), std::invalid_argument);
  EXPECT_THROW(draw_bernoulli(k, {2}, std::nan("")), std::invalid_argument);
  EXPECT_THROW(draw_normal(k, {2}, 0, -1), std::invalid_argument);
  EXPECT_THROW(draw_uniform(k, {2}, 1, 0), std::invalid_argument);
  EXPECT_THROW(draw_uniform(k, {-1}, 0, 1), std::invalid_argument);
  try {
    draw_bernoulli(k, {2}, 2.0);
    ADD_FAILURE() << "p = 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "draw_bernoulli: probability p must be in [0, 1], got 2");
  }
}

TEST(Random, ScalarsAndEmptyShapes) {
  const Key k = key_from_seed(11);
  const Tensor s = draw_normal(k, {}, 0, 1);
  ASSERT_EQ(s.reals.size(), 1u);
  EXPECT_EQ(s.reals[0], standard_normal_at(k, 0));
  EXPECT_TRUE(draw_uniform(k, {0, 3}, 0, 1).reals.empty());
}

}  // namespace quire::runtime
