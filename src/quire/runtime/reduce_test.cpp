#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "quire/runtime/elementary.h"
#include "quire/runtime/kernel_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/support/testing.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {
namespace {

using namespace kernel_testing;

using quire::testing::error_of;

Tensor random_reals(Shape shape, unsigned seed) { return kernel_testing::random_reals(std::move(shape), seed, 20); }

// x[i, j, k] of a [I, J, K] tensor.
double at3(const Tensor& x, int64_t i, int64_t j, int64_t k) {
  return x.reals[static_cast<size_t>((i * x.shape[1] + j) * x.shape[2] + k)];
}

TEST(Reduce, SumIsALeftFoldNotPairwise) {
  // Left to right: ((1e16 + 1) - 1e16) + 1 = 1; pairwise would give 0.
  const Tensor x = reals({4}, {1e16, 1.0, -1e16, 1.0});
  const Tensor s = reduce(ReduceOp::Sum, x, {0});
  EXPECT_EQ(s.shape, Shape{});
  expect_same(s.reals, {1.0});
}

TEST(Reduce, SumOverFirstMiddleLastAndSeveralAxes) {
  const Tensor x = random_reals({3, 4, 5}, 1);
  const Tensor first = reduce(ReduceOp::Sum, x, {0});
  const Tensor middle = reduce(ReduceOp::Sum, x, {1});
  const Tensor last = reduce(ReduceOp::Sum, x, {2});
  const Tensor outer = reduce(ReduceOp::Sum, x, {0, 2});
  const Tensor all = reduce(ReduceOp::Sum, x, {0, 1, 2});
  EXPECT_EQ(first.shape, (Shape{4, 5}));
  EXPECT_EQ(middle.shape, (Shape{3, 5}));
  EXPECT_EQ(last.shape, (Shape{3, 4}));
  EXPECT_EQ(outer.shape, (Shape{4}));
  EXPECT_EQ(all.shape, Shape{});
  std::vector<double> want_first, want_middle, want_last, want_outer;
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 5; ++k) {
      double acc = 0.0;
      for (int i = 0; i < 3; ++i) acc = acc + at3(x, i, j, k);
      want_first.push_back(acc);
    }
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double acc = 0.0;
      for (int j = 0; j < 4; ++j) acc = acc + at3(x, i, j, k);
      want_middle.push_back(acc);
    }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0.0;
      for (int k = 0; k < 5; ++k) acc = acc + at3(x, i, j, k);
      want_last.push_back(acc);
    }
  for (int j = 0; j < 4; ++j) {
    double acc = 0.0;
    for (int i = 0; i < 3; ++i)  // row-major over the reduced axes (0, 2): i outer, k inner
      for (int k = 0; k < 5; ++k) acc = acc + at3(x, i, j, k);
    want_outer.push_back(acc);
  }
  double want_all = 0.0;
  for (double v : x.reals) want_all = want_all + v;
  expect_same(first.reals, want_first);
  expect_same(middle.reals, want_middle);
  expect_same(last.reals, want_last);
  expect_same(outer.reals, want_outer);
  expect_same(all.reals, {want_all});
}

TEST(Reduce, MeanDividesTheSumByTheCount) {
  const Tensor x = random_reals({2, 3}, 2);
  const Tensor m = reduce(ReduceOp::Mean, x, {1});
  for (int i = 0; i < 2; ++i) {
    double acc = 0.0;
    for (int j = 0; j < 3; ++j) acc = acc + x.reals[i * 3 + j];
    EXPECT_TRUE(same(m.reals[i], acc / 3.0));
  }
  const Tensor mi = reduce(ReduceOp::Mean, ints(ElemKind::I32, {4}, {1, 2, 3, 5}), {0});
  EXPECT_EQ(mi.kind, ElemKind::Real);
  expect_same(mi.reals, {2.75});
}

TEST(Reduce, NoAxesIsAnExactCopy) {
  const Tensor x = reals({3}, {-0.0, kNaN, 2.5});
  const Tensor y = reduce(ReduceOp::Sum, x, {});
  EXPECT_EQ(y.shape, (Shape{3}));
  EXPECT_EQ(bits(y.reals[0]), bits(-0.0));  // a fold would have given 0.0 + -0.0 = +0.0
  expect_same(y.reals, x.reals);
  const Tensor z = reduce(ReduceOp::Mean, ints(ElemKind::I64, {2}, {3, -4}), {});
  EXPECT_EQ(z.kind, ElemKind::Real);
  expect_same(z.reals, {3.0, -4.0});
}

TEST(Reduce, MaxAndMinPropagateTheFirstNaN) {
  const double nan_a = std::bit_cast<double>(uint64_t{0x7ff8000000000001});
  const double nan_b = std::bit_cast<double>(uint64_t{0x7ff8000000000002});
  const Tensor x = reals({3, 4}, {1, nan_a, 3, nan_b,  //
                                  -kInf, -1, -0.0, 0.0,  //
                                  0.0, -0.0, 2, 1});
  const Tensor mx = reduce(ReduceOp::Max, x, {1});
  const Tensor mn = reduce(ReduceOp::Min, x, {1});
  EXPECT_EQ(bits(mx.reals[0]), bits(nan_a));
  EXPECT_EQ(bits(mn.reals[0]), bits(nan_a));
  EXPECT_EQ(bits(mx.reals[1]), bits(0.0));
  EXPECT_EQ(bits(mn.reals[1]), bits(-kInf));
  EXPECT_EQ(bits(mx.reals[2]), bits(2.0));
  EXPECT_EQ(bits(mn.reals[2]), bits(-0.0));
  // Over the first axis: column 1 meets its NaN first, column 3 its own.
  const Tensor cols = reduce(ReduceOp::Max, x, {0});
  EXPECT_EQ(bits(cols.reals[1]), bits(nan_a));
  EXPECT_EQ(bits(cols.reals[3]), bits(nan_b));
  expect_same({cols.reals[0], cols.reals[2]}, {1, 3});
}

TEST(Reduce, LogSumExpIsStable) {
  expect_same(reduce(ReduceOp::LogSumExp, reals({2}, {1000, 1000}), {0}).reals, {1000 + std::log(2.0)});
  expect_same(reduce(ReduceOp::LogSumExp, reals({2}, {-1000, -1000}), {0}).reals, {-1000 + std::log(2.0)});
  const std::vector<double> v = {0.5, -2, 3.25, 1};
  double acc = 0.0;
  for (double x : v) acc = acc + elementary_exp(x - 3.25);
  expect_same(reduce(ReduceOp::LogSumExp, reals({4}, v), {0}).reals, {3.25 + std::log(acc)});
}

TEST(Reduce, LogSumExpOfInfinitiesAndNaN) {
  const Tensor x = reals({4, 2}, {-kInf, -kInf, kInf, 1, kInf, kInf, kNaN, 1});
  const Tensor r = reduce(ReduceOp::LogSumExp, x, {1});
  expect_same(r.reals, {-kInf, kInf, kInf, kNaN});
  expect_same(reduce(ReduceOp::LogSumExp, reals({2}, {-kInf, 0.0}), {0}).reals, {0.0});
}

TEST(Reduce, EmptyAxes) {
  const Tensor x = reals({2, 0}, {});
  const Tensor sum = reduce(ReduceOp::Sum, x, {1});
  EXPECT_EQ(sum.shape, (Shape{2}));
  expect_same(sum.reals, {0.0, 0.0});
  expect_same(reduce(ReduceOp::Mean, x, {1}).reals, {kNaN, kNaN});
  expect_same(reduce(ReduceOp::LogSumExp, x, {1}).reals, {-kInf, -kInf});
  EXPECT_EQ(error_of<RuntimeError>([&] { reduce(ReduceOp::Max, x, {1}); }),
            "max: reduced axis 1 has size 0, and the max of no elements is undefined");
  EXPECT_EQ(error_of<RuntimeError>([&] { reduce(ReduceOp::Min, reals({0, 3}, {}), {0}); }),
            "min: reduced axis 0 has size 0, and the min of no elements is undefined");
  // No result element asks for a maximum of nothing, so there is nothing to fail.
  EXPECT_EQ(reduce(ReduceOp::Max, reals({0, 0}, {}), {1}).shape, (Shape{0}));
  // Reducing a non-empty axis of an empty tensor.
  EXPECT_EQ(reduce(ReduceOp::Max, reals({0, 3}, {}), {1}).shape, (Shape{0}));
}

TEST(Reduce, Integers) {
  const Tensor x = ints(ElemKind::I32, {2, 3}, {1, -5, 3, 7, 2, 2});
  const Tensor s = reduce(ReduceOp::Sum, x, {1});
  EXPECT_EQ(s.kind, ElemKind::I32);
  EXPECT_EQ(s.ints, (std::vector<int64_t>{-1, 11}));
  EXPECT_EQ(reduce(ReduceOp::Max, x, {0}).ints, (std::vector<int64_t>{7, 2, 3}));
  EXPECT_EQ(reduce(ReduceOp::Min, x, {0, 1}).ints, (std::vector<int64_t>{-5}));
  const Tensor lse = reduce(ReduceOp::LogSumExp, ints(ElemKind::I64, {2}, {1000, 1000}), {0});
  EXPECT_EQ(lse.kind, ElemKind::Real);
  expect_same(lse.reals, {1000 + std::log(2.0)});
  EXPECT_EQ(error_of<RuntimeError>([] {
              reduce(ReduceOp::Sum, ints(ElemKind::I32, {2, 2}, {1, 2, 2147483647, 1}), {1});
            }),
            "sum: the sum at [1] of a slice of 2 elements overflows i32");
  EXPECT_THROW(reduce(ReduceOp::Sum, ints(ElemKind::I64, {2}, {std::numeric_limits<int64_t>::max(), 1}), {0}),
               RuntimeError);
}

TEST(Reduce, Misuse) {
  const Tensor x = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(reduce(ReduceOp::Sum, x, {1, 0}), KernelMisuse);
  EXPECT_THROW(reduce(ReduceOp::Sum, x, {1, 1}), KernelMisuse);
  EXPECT_THROW(reduce(ReduceOp::Sum, x, {2}), KernelMisuse);
  EXPECT_THROW(reduce(ReduceOp::Sum, x, {-1}), KernelMisuse);
  EXPECT_THROW(reduce(ReduceOp::Sum, ints(ElemKind::Bool, {1}, {1}), {0}), KernelMisuse);
  EXPECT_EQ(reduce_result_kind(ReduceOp::Max, ElemKind::I32), ElemKind::I32);
  EXPECT_EQ(reduce_result_kind(ReduceOp::Mean, ElemKind::I32), ElemKind::Real);
}

}  // namespace
}  // namespace quire::runtime
