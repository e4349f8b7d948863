#pragma once
// What the kernel tests share: building tensors from literal values and
// comparing results bit for bit (any NaN matching any NaN, as kernels.h
// promises "a NaN" and not its payload).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quire/runtime/tensor.h"

namespace quire::runtime::kernel_testing {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline Tensor reals(Shape shape, std::vector<double> values) {
  Tensor t = Tensor::real(std::move(shape));
  EXPECT_EQ(t.reals.size(), values.size());
  t.reals = std::move(values);
  return t;
}

inline Tensor ints(ElemKind kind, Shape shape, std::vector<int64_t> values) {
  Tensor t = Tensor::integer(kind, std::move(shape));
  EXPECT_EQ(t.ints.size(), values.size());
  t.ints = std::move(values);
  return t;
}

/// Values of mixed signs and magnitudes, m · 2^e with m in (-1, 1) and e in
/// [-max_exponent, max_exponent]: any other order of a sum of them rounds differently.
inline Tensor random_reals(Shape shape, unsigned seed, int max_exponent) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-max_exponent, max_exponent);
  Tensor t = Tensor::real(std::move(shape));
  for (double& v : t.reals) v = std::ldexp(mantissa(rng), exponent(rng));
  return t;
}

inline uint64_t bits(double x) { return std::bit_cast<uint64_t>(x); }

/// Equal bits, except that any NaN matches any NaN.
inline ::testing::AssertionResult same(double got, double want) {
  if ((std::isnan(got) && std::isnan(want)) || bits(got) == bits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " (0x" << std::hex << bits(got) << "), want " << want
                                       << " (0x" << bits(want) << ")";
}

inline void expect_same(const RealStorage& got, const RealStorage& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same(got[i], want[i])) << "at " << i;
}

}  // namespace quire::runtime::kernel_testing
