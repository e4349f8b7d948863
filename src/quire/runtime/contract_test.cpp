#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "quire/runtime/kernel_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/support/testing.h"

// The reference loops below must round like the kernel: product, then sum.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {
namespace {

using namespace kernel_testing;

void expect_bits(const RealStorage& got, const RealStorage& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << "at " << i;
}

using quire::testing::error_of;

Tensor random_reals(Shape shape, unsigned seed) { return kernel_testing::random_reals(std::move(shape), seed, 12); }

// Row-major element of a tensor at a multi-index.
double at(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : index) flat = flat * t.shape[d++] + i;
  return t.reals[static_cast<size_t>(flat)];
}

TEST(Contract, MatrixProductIsTheTripleLoopBitForBit) {
  const Tensor a = random_reals({5, 7}, 1);
  const Tensor b = random_reals({7, 3}, 2);
  std::vector<double> want;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0.0;
      for (int k = 0; k < 7; ++k) acc = acc + at(a, {i, k}) * at(b, {k, j});
      want.push_back(acc);
    }
  const Tensor via_contract = contract(a, b, {{0, -1}, {-1, 1}}, {{1, 0}});
  EXPECT_EQ(via_contract.shape, (Shape{5, 3}));
  expect_bits(via_contract.reals, want);
  expect_bits(dot(a, b).reals, want);
  // The same product with the result axes swapped: r[j, i].
  const Tensor swapped = contract(a, b, {{-1, 1}, {0, -1}}, {{1, 0}});
  EXPECT_EQ(swapped.shape, (Shape{3, 5}));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(bits(swapped.reals[j * 5 + i]), bits(want[i * 3 + j]));
}

TEST(Contract, AttentionScoresWithBatchAxes) {
  // q [b, h, t, d] · k [b, h, s, d] → [b, h, t, s], summing over d.
  const Tensor q = random_reals({2, 3, 4, 8}, 3);
  const Tensor k = random_reals({2, 3, 5, 8}, 4);
  const Tensor r = contract(q, k, {{0, 0}, {1, 1}, {2, -1}, {-1, 2}}, {{3, 3}});
  EXPECT_EQ(r.shape, (Shape{2, 3, 4, 5}));
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int t = 0; t < 4; ++t)
        for (int s = 0; s < 5; ++s) {
          double acc = 0.0;
          for (int d = 0; d < 8; ++d) acc = acc + at(q, {b, h, t, d}) * at(k, {b, h, s, d});
          want.push_back(acc);
        }
  expect_bits(r.reals, want);
}

TEST(Contract, SeveralPairsSumInTheOrderListed) {
  // a [3, 4, 5] · b [5, 4, 2] over (a1, b1) and (a2, b0) → [3, 2].
  const Tensor a = random_reals({3, 4, 5}, 5);
  const Tensor b = random_reals({5, 4, 2}, 6);
  std::vector<double> j_outer, k_outer;
  for (int i = 0; i < 3; ++i)
    for (int n = 0; n < 2; ++n) {
      double acc = 0.0;
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) acc = acc + at(a, {i, j, k}) * at(b, {k, j, n});
      j_outer.push_back(acc);
      acc = 0.0;
      for (int k = 0; k < 5; ++k)
        for (int j = 0; j < 4; ++j) acc = acc + at(a, {i, j, k}) * at(b, {k, j, n});
      k_outer.push_back(acc);
    }
  expect_bits(contract(a, b, {{0, -1}, {-1, 2}}, {{1, 1}, {2, 0}}).reals, j_outer);
  expect_bits(contract(a, b, {{0, -1}, {-1, 2}}, {{2, 0}, {1, 1}}).reals, k_outer);
  // Full contraction to a scalar: all three pairs.
  const Tensor c = random_reals({2, 3}, 7);
  const Tensor full = contract(c, c, {}, {{0, 0}, {1, 1}});
  EXPECT_EQ(full.shape, Shape{});
  double acc = 0.0;
  for (double v : c.reals) acc = acc + v * v;
  expect_bits(full.reals, {acc});
}

TEST(Contract, NoFusedMultiplyAdd) {
  // With x = 1 + 2^-27, x*x = 1 + 2^-26 + 2^-54 rounds to 1 + 2^-26; so
  // -(1 + 2^-26) + x*x is 0 when rounded twice, 2^-54 when fused.
  const double x = 1.0 + 0x1p-27;
  const Tensor a = reals({2}, {1.0, x});
  const Tensor b = reals({2}, {-(1.0 + 0x1p-26), x});
  expect_bits(dot(a, b).reals, {0.0});
}

TEST(Contract, FusedStepsAreOneRoundingEach) {
  // The case above, asked to fuse: 2^-54 in f64.
  const double x = 1.0 + 0x1p-27;
  const Tensor a = reals({2}, {1.0, x});
  const Tensor b = reals({2}, {-(1.0 + 0x1p-26), x});
  expect_bits(dot(a, b, FloatType::F64, ProductStep::Fused).reals, {0x1p-54});
  // In f32: y = 1 + 2^-12, y*y = 1 + 2^-11 + 2^-24 rounds (ties to even) to
  // 1 + 2^-11 in f32; fused, the 2^-24 survives the cancellation.
  const double y = 1.0 + 0x1p-12;
  const Tensor c = reals({2}, {1.0, y});
  const Tensor d = reals({2}, {-(1.0 + 0x1p-11), y});
  expect_bits(dot(c, d, FloatType::F32).reals, {0.0});
  expect_bits(dot(c, d, FloatType::F32, ProductStep::Fused).reals, {0x1p-24});
}

TEST(Contract, FusedF32StepsAreTheFmafChain) {
  // Random f32 operands: every element is fmaf over k in increasing order.
  Tensor a = random_reals({5, 37}, 3), b = random_reals({37, 4}, 4);
  for (double& v : a.reals) v = static_cast<float>(v);
  for (double& v : b.reals) v = static_cast<float>(v);
  const Tensor c = dot(a, b, FloatType::F32, ProductStep::Fused);
  std::vector<double> want;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < 37; ++p)
        acc = std::fma(static_cast<float>(at(a, {i, p})), static_cast<float>(at(b, {p, j})), acc);
      want.push_back(acc);
    }
  expect_bits(c.reals, want);
}

TEST(Contract, FusedStepsNeedAnF64OrF32AccumulatorOfItsOperands) {
  const Tensor a = reals({2}, {1.0, 2.0}), b = reals({2}, {3.0, 0.1});
  EXPECT_THROW((void)dot(a, a, FloatType::BF16, ProductStep::Fused), KernelMisuse);
  EXPECT_EQ(error_of<KernelMisuse>([&] { (void)dot(a, b, FloatType::F32, ProductStep::Fused); }),
            "internal: dot: a fused f32 step reads 0.1, which is not an f32 value");
}

TEST(Contract, OuterProductsAndEmptySums) {
  // No pair: each element is 0.0 + a*b, which turns -0.0 into +0.0.
  const Tensor a = reals({2}, {-0.0, 2});
  const Tensor b = reals({3}, {1, 2, 3});
  const Tensor outer = contract(a, b, {{0, -1}, {-1, 0}}, {});
  EXPECT_EQ(outer.shape, (Shape{2, 3}));
  expect_bits(outer.reals, {0.0, 0.0, 0.0, 2, 4, 6});
  // A contracted axis of size 0: every sum is empty, +0.0.
  const Tensor z = dot(Tensor::real({2, 0}), Tensor::real({0, 3}));
  EXPECT_EQ(z.shape, (Shape{2, 3}));
  expect_bits(z.reals, std::vector<double>(6, 0.0));
}

TEST(Dot, IsTensordotWithOneAxis) {
  const Tensor v = random_reals({4}, 8);
  const Tensor w = random_reals({4}, 9);
  const Tensor m = random_reals({4, 3}, 10);
  const Tensor x3 = random_reals({2, 3, 4}, 11);
  const Tensor w3 = random_reals({4, 2, 3}, 12);

  double acc = 0.0;
  for (int k = 0; k < 4; ++k) acc = acc + v.reals[k] * w.reals[k];
  const Tensor vw = dot(v, w);
  EXPECT_EQ(vw.shape, Shape{});
  expect_bits(vw.reals, {acc});

  const Tensor vm = dot(v, m);  // [4] · [4, 3] → [3]
  EXPECT_EQ(vm.shape, (Shape{3}));
  for (int j = 0; j < 3; ++j) {
    double s = 0.0;
    for (int k = 0; k < 4; ++k) s = s + v.reals[k] * at(m, {k, j});
    EXPECT_EQ(bits(vm.reals[j]), bits(s));
  }

  const Tensor mt = random_reals({3, 4}, 13);
  const Tensor mv = dot(mt, v);  // [3, 4] · [4] → [3]
  EXPECT_EQ(mv.shape, (Shape{3}));
  for (int i = 0; i < 3; ++i) {
    double s = 0.0;
    for (int k = 0; k < 4; ++k) s = s + at(mt, {i, k}) * v.reals[k];
    EXPECT_EQ(bits(mv.reals[i]), bits(s));
  }

  const Tensor xw = dot(x3, w3);  // [2, 3, 4] · [4, 2, 3] → [2, 3, 2, 3]
  EXPECT_EQ(xw.shape, (Shape{2, 3, 2, 3}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int p = 0; p < 2; ++p)
        for (int q = 0; q < 3; ++q) {
          double s = 0.0;
          for (int k = 0; k < 4; ++k) s = s + at(x3, {i, j, k}) * at(w3, {k, p, q});
          want.push_back(s);
        }
  expect_bits(xw.reals, want);

  const Tensor xm = dot(x3, m);  // [2, 3, 4] · [4, 3] → [2, 3, 3]
  EXPECT_EQ(xm.shape, (Shape{2, 3, 3}));
}

TEST(Contract, SizeMismatchesAreRuntimeErrors) {
  const Tensor a = random_reals({2, 3}, 14);
  const Tensor b = random_reals({4, 5}, 15);
  EXPECT_EQ(error_of<RuntimeError>([&] { dot(a, b); }),
            "dot: contracted axis 1 of a has size 3 but axis 0 of b has size 4");
  EXPECT_EQ(error_of<RuntimeError>([&] { contract(a, b, {{0, 0}}, {{1, 1}}); }),
            "contract: batch result axis 0 has size 2 in a (axis 0) but 4 in b (axis 0)");
}

TEST(Contract, MalformedPlansAreMisuse) {
  const Tensor a = random_reals({2, 3}, 16);
  const Tensor b = random_reals({3, 2}, 17);
  EXPECT_THROW(contract(a, b, {{0, -1}}, {{1, 0}}), KernelMisuse);                     // b's axis 1 unused
  EXPECT_THROW(contract(a, b, {{0, -1}, {-1, 1}, {0, -1}}, {{1, 0}}), KernelMisuse);   // a's axis 0 twice
  EXPECT_THROW(contract(a, b, {{0, -1}, {-1, 1}, {-1, -1}}, {{1, 0}}), KernelMisuse);  // an axis from neither
  EXPECT_THROW(contract(a, b, {{0, -1}, {-1, 1}}, {{1, 2}}), KernelMisuse);            // no axis 2
  EXPECT_THROW(dot(Tensor::scalar(1.0), a), KernelMisuse);
  Tensor i = Tensor::integer(ElemKind::I64, {3, 2});
  EXPECT_THROW(dot(a, i), KernelMisuse);
}

TEST(Contract, A256CubedProductIsQuick) {
  const Tensor a = random_reals({256, 256}, 18);
  const Tensor b = random_reals({256, 256}, 19);
  const auto start = std::chrono::steady_clock::now();
  const Tensor c = dot(a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);  // generous: a sanitizer build is a few times slower than the ~0.05 s of a plain one
  double acc = 0.0;
  for (int k = 0; k < 256; ++k) acc = acc + at(a, {17, k}) * at(b, {k, 203});
  EXPECT_EQ(bits(c.reals[17 * 256 + 203]), bits(acc));
}

}  // namespace
}  // namespace quire::runtime
