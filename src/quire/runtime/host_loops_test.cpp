// host_loops: the vectorized loops give each element's scalar result, and
// the f32 share of a mean is the f64 share rounded to f32 (the claim the
// interpreter's mean gradient relies on to skip the f64 step).

#include "quire/runtime/host_loops.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace quire::runtime {
namespace {

std::vector<float> floats_of_every_kind(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> xs = {0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1.fffffep127f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  while (xs.size() < n) {
    const auto bits = static_cast<uint32_t>(rng());
    const float x = std::bit_cast<float>(bits);
    if (!std::isnan(x)) xs.push_back(x);
  }
  return xs;
}

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(HostLoops, RoundingToF32IsEachElementsConversionAndSaysWhetherAllAreFinite) {
  std::mt19937_64 rng(3);
  std::vector<double> v(1000 + 7);
  for (double& d : v) d = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng), static_cast<int>(rng() % 270) - 150);  // 2^-150 to 2^120: finite as f32
  std::vector<float> f(v.size());
  EXPECT_TRUE(round_to_f32(v.data(), f.data(), v.size()));
  for (size_t i = 0; i < v.size(); ++i) ASSERT_TRUE(same(f[i], static_cast<float>(v[i]))) << v[i];
  for (double bad : {1e39, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<double> w = v;
    w[1003] = bad;  // in the remainder after the blocks of 16
    EXPECT_FALSE(round_to_f32(w.data(), f.data(), w.size())) << bad;
    w = v;
    w[5] = bad;  // in a block
    EXPECT_FALSE(round_to_f32(w.data(), f.data(), w.size())) << bad;
  }
}

// Every element, in the blocks of 16 and in the tail, is round_to's value
// (the definition, on the f64 path) with a NaN the quiet NaN of its sign.
TEST(HostLoops, RoundingToAHalfIsRoundTosValueForEveryElement) {
  std::vector<float> xs = floats_of_every_kind(1000 + 7, 5);
  // Ties of each half (bf16 drops 16 bits, f16 13), both signs, and NaNs with
  // a payload, in a block and in the tail.
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F801000u, 0x3F803000u, 0x477FF000u, 0x33000000u,
                        0x7F800001u, 0xFFC01234u})
    xs.insert(xs.begin() + 3, std::bit_cast<float>(bits)), xs.push_back(std::bit_cast<float>(bits));
  for (FloatType half : {FloatType::BF16, FloatType::F16}) {
    std::vector<float> out(xs.size(), 1.0f);
    round_half_of_f32(half, xs.data(), out.data(), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const uint32_t got = std::bit_cast<uint32_t>(out[i]);
      if (std::isnan(xs[i])) {
        ASSERT_EQ(got, (std::bit_cast<uint32_t>(xs[i]) & 0x80000000u) | 0x7FC00000u) << float_type_name(half) << " " << i;
      } else {
        const float want = static_cast<float>(round_to(half, static_cast<double>(xs[i])));
        ASSERT_EQ(got, std::bit_cast<uint32_t>(want)) << float_type_name(half) << " " << xs[i];
      }
    }
  }
  std::vector<float> out(1);
  EXPECT_THROW(round_half_of_f32(FloatType::F32, xs.data(), out.data(), 1), std::logic_error);
}

TEST(HostLoops, AnF32ShareIsTheF64ShareRoundedToF32) {
  const std::vector<float> xs = floats_of_every_kind(200000, 5);
  std::vector<float> f32(xs.size());
  std::vector<double> f64(xs.size());
  // Powers of two (multiplied by the reciprocal) and other counts (divided).
  for (double count : {256.0, 65536.0, 2.0, 3.0, 768.0, 1000.0, 12345.0}) {
    int exponent = 0;
    const bool power_of_two = std::frexp(count, &exponent) == 0.5;
    const double factor = power_of_two ? 1.0 / count : count;
    scale(xs.data(), static_cast<float>(factor), !power_of_two, f32.data(), xs.size());
    scale(xs.data(), factor, !power_of_two, f64.data(), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = power_of_two ? static_cast<double>(xs[i]) * factor : static_cast<double>(xs[i]) / count;
      ASSERT_TRUE(std::bit_cast<uint64_t>(f64[i]) == std::bit_cast<uint64_t>(want) || std::isnan(want)) << xs[i];
      ASSERT_TRUE(same(f32[i], static_cast<float>(want))) << xs[i] << " / " << count;
    }
  }
}

}  // namespace
}  // namespace quire::runtime
