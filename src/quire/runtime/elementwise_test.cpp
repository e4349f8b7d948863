#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "quire/runtime/elementary.h"
#include "quire/runtime/kernel_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/support/testing.h"

// The expected values below are computed by the very expressions kernels.h
// promises; a fused multiply-add here would make them disagree for the wrong reason.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {
namespace {

using namespace kernel_testing;

double apply(UnaryOp op, double x) { return unary(op, Tensor::scalar(x)).reals.at(0); }

using quire::testing::error_of;

const std::vector<double> kPoints = {-7.25, -3.5, -1.0, -0.5, -1e-8, 0.25, 1.0, 2.5, 10.0, 31.0};

// ---------------------------------------------------------------------------
// Unary

TEST(Unary, EachOpIsItsDocumentedExpressionBitForBit) {
  const double k = 0x1.9884533d43651p-1;
  for (double x : kPoints) {
    SCOPED_TRACE(x);
    EXPECT_TRUE(same(apply(UnaryOp::Neg, x), -x));
    EXPECT_TRUE(same(apply(UnaryOp::Abs, x), std::fabs(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Exp, x), elementary_exp(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Log, x), std::log(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Sqrt, x), std::sqrt(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Rsqrt, x), 1.0 / std::sqrt(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Tanh, x), std::tanh(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Erf, x), elementary_erf(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Sigmoid, x), 1.0 / (1.0 + elementary_exp(-x))));
    EXPECT_TRUE(same(apply(UnaryOp::Relu, x), x > 0 ? x : 0.0));
    EXPECT_TRUE(same(apply(UnaryOp::Gelu, x), 0.5 * x * (1.0 + elementary_erf(x * M_SQRT1_2))));
    EXPECT_TRUE(same(apply(UnaryOp::GeluTanh, x), 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)))));
    EXPECT_TRUE(same(apply(UnaryOp::Silu, x), x * (1.0 / (1.0 + elementary_exp(-x)))));
    EXPECT_TRUE(same(apply(UnaryOp::Log1p, x), std::log1p(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Expm1, x), std::expm1(x)));
    EXPECT_TRUE(same(apply(UnaryOp::Softplus, x), x > 20.0 ? x : std::log1p(elementary_exp(x))));
  }
}

/// Whether `got` is within `ulps` units in the last place of `want`.
bool within_ulps(double got, double want, double ulps) {
  const double w = std::fabs(want);
  return std::fabs(got - want) <= ulps * (std::nextafter(w, INFINITY) - w);
}

// Values of the mathematical functions (60-digit decimal sums of their series
// and of log(1 + e^x), rounded to f64), not of the kernels' expressions.
TEST(Unary, Log1pExpm1AndSoftplusAgreeWithIndependentValues) {
  // Near 0, where log(1 + x) and exp(x) - 1 lose every digit but the first few.
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Log1p, 1e-10), 9.999999999500001e-11, 1));
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Expm1, 1e-10), 1.00000000005e-10, 1));
  EXPECT_FALSE(within_ulps(std::log(1.0 + 1e-10), 9.999999999500001e-11, 1e6));  // what they avoid
  EXPECT_FALSE(within_ulps(std::exp(1e-10) - 1.0, 1.00000000005e-10, 1e6));
  // softplus: log1p(exp(x)) up to 20, x above (F.softplus, beta 1, threshold 20).
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Softplus, -30.0), 9.357622968839737e-14, 2));
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Softplus, 0.0), 0.6931471805599453, 2));
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Softplus, 1.0), 1.3132616875182228, 2));
  EXPECT_TRUE(within_ulps(apply(UnaryOp::Softplus, 20.0), 20.000000002061153, 2));  // not above 20
  EXPECT_EQ(apply(UnaryOp::Softplus, 25.0), 25.0);  // log(1 + e^25) = 25.000000000013888
}

TEST(Unary, TheGeluTanhConstantIsRoundedSqrtTwoOverPi) {
  EXPECT_EQ(0x1.9884533d43651p-1, std::sqrt(2.0 / M_PI));
  EXPECT_EQ(0x1.9884533d43651p-1, M_SQRT2 * M_2_SQRTPI * 0.5);  // torch's spelling gives the same f64
}

// Values from the mathematical definitions (not the kernels' expressions), to
// catch a formula that is wrong in both the kernel and the test above.
TEST(Unary, AgreesWithIndependentValues) {
  EXPECT_NEAR(apply(UnaryOp::Sigmoid, 1.0), 0.7310585786300049, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::Sigmoid, -1.0), 0.2689414213699951, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::Gelu, 1.0), 0.8413447460685429, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::Gelu, -1.0), -0.15865525393145707, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::GeluTanh, 1.0), 0.8411919906082768, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::Silu, 1.0), 0.7310585786300049, 4e-16);
  EXPECT_NEAR(apply(UnaryOp::Erf, 0.5), 0.5204998778130465, 4e-16);
  EXPECT_EQ(apply(UnaryOp::Rsqrt, 4.0), 0.5);
}

TEST(Unary, SpecialValues) {
  struct Case {
    UnaryOp op;
    double x, want;
  };
  const Case cases[] = {
      {UnaryOp::Neg, 0.0, -0.0},       {UnaryOp::Neg, -0.0, 0.0},        {UnaryOp::Neg, kInf, -kInf},
      {UnaryOp::Neg, kNaN, kNaN},      {UnaryOp::Abs, -0.0, 0.0},        {UnaryOp::Abs, -kInf, kInf},
      {UnaryOp::Abs, kNaN, kNaN},      {UnaryOp::Exp, 0.0, 1.0},         {UnaryOp::Exp, -0.0, 1.0},
      {UnaryOp::Exp, -kInf, 0.0},      {UnaryOp::Exp, kInf, kInf},       {UnaryOp::Exp, 1000.0, kInf},
      {UnaryOp::Exp, kNaN, kNaN},      {UnaryOp::Log, 1.0, 0.0},         {UnaryOp::Log, 0.0, -kInf},
      {UnaryOp::Log, -0.0, -kInf},     {UnaryOp::Log, -1.0, kNaN},       {UnaryOp::Log, kInf, kInf},
      {UnaryOp::Sqrt, -0.0, -0.0},     {UnaryOp::Sqrt, 4.0, 2.0},        {UnaryOp::Sqrt, -1.0, kNaN},
      {UnaryOp::Sqrt, kInf, kInf},     {UnaryOp::Rsqrt, 0.0, kInf},      {UnaryOp::Rsqrt, -0.0, -kInf},
      {UnaryOp::Rsqrt, kInf, 0.0},     {UnaryOp::Rsqrt, -1.0, kNaN},     {UnaryOp::Tanh, -0.0, -0.0},
      {UnaryOp::Tanh, kInf, 1.0},      {UnaryOp::Tanh, -kInf, -1.0},     {UnaryOp::Tanh, kNaN, kNaN},
      {UnaryOp::Erf, -0.0, -0.0},      {UnaryOp::Erf, kInf, 1.0},        {UnaryOp::Erf, -kInf, -1.0},
      {UnaryOp::Sigmoid, 0.0, 0.5},    {UnaryOp::Sigmoid, kInf, 1.0},    {UnaryOp::Sigmoid, -kInf, 0.0},
      {UnaryOp::Sigmoid, -800.0, 0.0}, {UnaryOp::Sigmoid, kNaN, kNaN},   {UnaryOp::Relu, -0.0, 0.0},
      {UnaryOp::Relu, 0.0, 0.0},       {UnaryOp::Relu, -2.0, 0.0},       {UnaryOp::Relu, 3.0, 3.0},
      {UnaryOp::Relu, kInf, kInf},     {UnaryOp::Relu, -kInf, 0.0},      {UnaryOp::Relu, kNaN, kNaN},
      {UnaryOp::Gelu, 0.0, 0.0},       {UnaryOp::Gelu, -0.0, -0.0},      {UnaryOp::Gelu, kInf, kInf},
      {UnaryOp::Gelu, -kInf, kNaN},    {UnaryOp::Gelu, kNaN, kNaN},      {UnaryOp::GeluTanh, -0.0, -0.0},
      {UnaryOp::GeluTanh, kInf, kInf}, {UnaryOp::GeluTanh, -kInf, kNaN}, {UnaryOp::Silu, 0.0, 0.0},
      {UnaryOp::Silu, -0.0, -0.0},     {UnaryOp::Silu, kInf, kInf},      {UnaryOp::Silu, -kInf, kNaN},
      {UnaryOp::Silu, kNaN, kNaN},     {UnaryOp::Log1p, 0.0, 0.0},       {UnaryOp::Log1p, -0.0, -0.0},
      {UnaryOp::Log1p, -1.0, -kInf},   {UnaryOp::Log1p, -2.0, kNaN},     {UnaryOp::Log1p, kInf, kInf},
      {UnaryOp::Expm1, 0.0, 0.0},      {UnaryOp::Expm1, -0.0, -0.0},     {UnaryOp::Expm1, -kInf, -1.0},
      {UnaryOp::Expm1, kInf, kInf},    {UnaryOp::Expm1, kNaN, kNaN},     {UnaryOp::Softplus, -kInf, 0.0},
      {UnaryOp::Softplus, kInf, kInf}, {UnaryOp::Softplus, -800.0, 0.0}, {UnaryOp::Softplus, 1000.0, 1000.0},
      {UnaryOp::Softplus, kNaN, kNaN},
  };
  for (const Case& c : cases) EXPECT_TRUE(same(apply(c.op, c.x), c.want)) << op_name(c.op) << "(" << c.x << ")";
}

TEST(Unary, KeepsTheShape) {
  const Tensor y = unary(UnaryOp::Abs, reals({2, 0, 3}, {}));
  EXPECT_EQ(y.shape, (Shape{2, 0, 3}));
  const Tensor z = unary(UnaryOp::Neg, reals({2, 2}, {1, -2, 3, -4}));
  EXPECT_EQ(z.shape, (Shape{2, 2}));
  expect_same(z.reals, {-1, 2, -3, 4});
}

TEST(Unary, IntegersAndBools) {
  const Tensor n = unary(UnaryOp::Neg, ints(ElemKind::I64, {3}, {5, -7, 0}));
  EXPECT_EQ(n.kind, ElemKind::I64);
  EXPECT_EQ(n.ints, (std::vector<int64_t>{-5, 7, 0}));
  EXPECT_EQ(unary(UnaryOp::Abs, ints(ElemKind::I32, {2}, {-3, 4})).ints, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(unary(UnaryOp::Relu, ints(ElemKind::I32, {2}, {-3, 4})).ints, (std::vector<int64_t>{0, 4}));
  const Tensor e = unary(UnaryOp::Exp, ints(ElemKind::I32, {1}, {0}));
  EXPECT_EQ(e.kind, ElemKind::Real);
  expect_same(e.reals, {1.0});
  const Tensor no = unary(UnaryOp::Not, ints(ElemKind::Bool, {2}, {0, 1}));
  EXPECT_EQ(no.kind, ElemKind::Bool);
  EXPECT_EQ(no.ints, (std::vector<int64_t>{1, 0}));

  EXPECT_EQ(error_of<RuntimeError>([] { unary(UnaryOp::Neg, ints(ElemKind::I32, {2}, {1, -2147483648})); }),
            "neg: -2147483648 at [1] overflows i32");
  EXPECT_EQ(error_of<RuntimeError>([] {
              unary(UnaryOp::Abs, ints(ElemKind::I64, {1}, {std::numeric_limits<int64_t>::min()}));
            }),
            "abs: -9223372036854775808 at [0] overflows i64");
}

TEST(Unary, KindsItDoesNotTakeAreMisuse) {
  EXPECT_EQ(unary_result_kind(UnaryOp::Not, ElemKind::Real), std::nullopt);
  EXPECT_EQ(unary_result_kind(UnaryOp::Exp, ElemKind::Bool), std::nullopt);
  EXPECT_EQ(unary_result_kind(UnaryOp::Tanh, ElemKind::I64), ElemKind::Real);
  EXPECT_THROW(unary(UnaryOp::Not, Tensor::scalar(1.0)), KernelMisuse);
  EXPECT_THROW(unary(UnaryOp::Exp, ints(ElemKind::Bool, {1}, {1})), KernelMisuse);
  Tensor broken = Tensor::real({2, 2});
  broken.reals = RealStorage(3);
  EXPECT_THROW(unary(UnaryOp::Exp, broken), KernelMisuse);
}

// ---------------------------------------------------------------------------
// Binary and broadcasting

TEST(Binary, SameShape) {
  const Tensor a = reals({2, 2}, {1, 2, 3, 4});
  const Tensor b = reals({2, 2}, {0.5, -1, 0.1, 8});
  const Tensor c = binary(BinaryOp::Add, a, {0, 1}, b, {0, 1}, 2);
  EXPECT_EQ(c.shape, (Shape{2, 2}));
  expect_same(c.reals, {1.5, 1.0, 3.0 + 0.1, 12});
  expect_same(binary(BinaryOp::Div, a, {0, 1}, b, {0, 1}, 2).reals, {2, -2, 3 / 0.1, 0.5});
}

TEST(Binary, BroadcastsAnAbsentAxis) {
  // a[i, j] - b[j]
  const Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = reals({3}, {10, 20, 30});
  const Tensor c = binary(BinaryOp::Sub, a, {0, 1}, b, {-1, 0}, 2);
  EXPECT_EQ(c.shape, (Shape{2, 3}));
  expect_same(c.reals, {-9, -18, -27, -6, -15, -24});
  // b[i] * a[j, i]: the map puts b's only axis on result axis 0.
  const Tensor d = binary(BinaryOp::Mul, reals({2}, {2, 3}), {0, -1}, reals({3, 2}, {1, 2, 3, 4, 5, 6}), {1, 0}, 2);
  EXPECT_EQ(d.shape, (Shape{2, 3}));
  expect_same(d.reals, {2, 6, 10, 6, 12, 18});
}

TEST(Binary, BroadcastsSizeOneAxes) {
  // [2, 1] + [1, 3] → [2, 3]
  const Tensor a = reals({2, 1}, {1, 2});
  const Tensor b = reals({1, 3}, {10, 20, 30});
  const Tensor c = binary(BinaryOp::Add, a, {0, 1}, b, {0, 1}, 2);
  EXPECT_EQ(c.shape, (Shape{2, 3}));
  expect_same(c.reals, {11, 21, 31, 12, 22, 32});
  // A size-1 axis may also be left out of the map.
  const Tensor d = binary(BinaryOp::Add, a, {0, -1}, b, {-1, 1}, 2);
  EXPECT_EQ(d.shape, (Shape{2, 3}));
  expect_same(d.reals, c.reals);
  // Size 1 against size 0 gives 0.
  EXPECT_EQ(binary(BinaryOp::Add, reals({1}, {1}), {0}, reals({0}, {}), {0}, 1).shape, (Shape{0}));
}

TEST(Binary, ATransposedMapReadsThePermutedOperand) {
  // c[i, j] = a[i, j] + b[j, i]
  const Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = reals({3, 2}, {10, 40, 20, 50, 30, 60});
  const Tensor c = binary(BinaryOp::Add, a, {0, 1}, b, {1, 0}, 2);
  expect_same(c.reals, {11, 22, 33, 44, 55, 66});
  // Both transposed, into a rank-3 result with a broadcast middle axis:
  // c[i, k, j] = x[j, i] * y[j, i]
  const Tensor x = reals({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor e = binary(BinaryOp::Mul, x, {1, -1, 0}, x, {1, -1, 0}, 3);
  EXPECT_EQ(e.shape, (Shape{2, 1, 3}));
  expect_same(e.reals, {1, 9, 25, 4, 16, 36});
}

TEST(Binary, AScalarOperand) {
  const Tensor c = binary(BinaryOp::Mul, reals({2, 2}, {1, 2, 3, 4}), {0, 1}, Tensor::scalar(0.5), {-1, -1}, 2);
  expect_same(c.reals, {0.5, 1, 1.5, 2});
  const Tensor s = binary(BinaryOp::Add, Tensor::scalar(1.0), {}, Tensor::scalar(2.0), {}, 0);
  EXPECT_EQ(s.shape, Shape{});
  expect_same(s.reals, {3.0});
}

TEST(Binary, RunTimeSizeMismatchesAreRuntimeErrors) {
  const Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = reals({4}, {1, 2, 3, 4});
  EXPECT_EQ(error_of<RuntimeError>([&] { binary(BinaryOp::Add, a, {0, 1}, b, {-1, 0}, 2); }),
            "add: result axis 1 has size 3 in operand 0 but 4 in operand 1");
  // An axis left out of the map must have size 1.
  EXPECT_EQ(error_of<RuntimeError>([&] { binary(BinaryOp::Mul, a, {0, -1}, b, {-1, 0}, 2); }),
            "mul: axis 1 of operand 0 has size 3 but feeds no result axis");
  EXPECT_EQ(error_of<RuntimeError>([&] { broadcast_result_shape({{&a, {0, 1}}, {&b, {-1, 0}}}, 2); }),
            "broadcast: result axis 1 has size 3 in operand 0 but 4 in operand 1");
}

TEST(Binary, MalformedMapsAreMisuse) {
  const Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(binary(BinaryOp::Add, a, {0, 1}, a, {0}, 2), KernelMisuse);      // too short
  EXPECT_THROW(binary(BinaryOp::Add, a, {0, 1}, a, {0, 0}, 2), KernelMisuse);   // an axis twice
  EXPECT_THROW(binary(BinaryOp::Add, a, {0, 1}, a, {0, 2}, 2), KernelMisuse);   // no axis 2
  EXPECT_THROW(binary(BinaryOp::Add, a, {0, 1}, a, {0, -2}, 2), KernelMisuse);  // below -1
}

TEST(Binary, PowSquaresForAScalarTwo) {
  const std::vector<double> xs = {0.1, -3.7, 1e200, 1.0000000001, -0.0};
  const Tensor x = reals({5}, xs);
  const Tensor sq = binary(BinaryOp::Pow, x, {0}, Tensor::scalar(2.0), {-1}, 1);
  const Tensor p = binary(BinaryOp::Pow, x, {0}, reals({5}, {2, 2, 2, 2, 2}), {0}, 1);  // not a scalar: std::pow
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(same(sq.reals[i], xs[i] * xs[i]));
    EXPECT_TRUE(same(p.reals[i], std::pow(xs[i], 2.0)));
  }
  expect_same(binary(BinaryOp::Pow, reals({2}, {-8, 2}), {0}, Tensor::scalar(1.0 / 3.0), {-1}, 1).reals,
              {kNaN, std::pow(2.0, 1.0 / 3.0)});
}

TEST(Binary, MinMaxPropagateTheFirstNaNAndOrderSignedZeros) {
  const double nan_a = std::bit_cast<double>(uint64_t{0x7ff8000000000001});
  const double nan_b = std::bit_cast<double>(uint64_t{0x7ff8000000000002});
  const Tensor a = reals({6}, {nan_a, 1.0, nan_a, -0.0, 0.0, -kInf});
  const Tensor b = reals({6}, {2.0, nan_b, nan_b, 0.0, -0.0, 3.0});
  const Tensor mx = binary(BinaryOp::Max, a, {0}, b, {0}, 1);
  const Tensor mn = binary(BinaryOp::Min, a, {0}, b, {0}, 1);
  const std::vector<uint64_t> want_max = {bits(nan_a), bits(nan_b), bits(nan_a), bits(0.0), bits(0.0), bits(3.0)};
  const std::vector<uint64_t> want_min = {bits(nan_a), bits(nan_b), bits(nan_a), bits(-0.0), bits(-0.0), bits(-kInf)};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(bits(mx.reals[i]), want_max[i]) << i;
    EXPECT_EQ(bits(mn.reals[i]), want_min[i]) << i;
  }
}

TEST(Binary, ComparisonsGiveBoolAndFollowIEEE) {
  const Tensor a = reals({4}, {1.0, kNaN, -0.0, 2.0});
  const Tensor b = reals({4}, {2.0, kNaN, 0.0, 2.0});
  auto cmp = [&](BinaryOp op) {
    const Tensor c = binary(op, a, {0}, b, {0}, 1);
    EXPECT_EQ(c.kind, ElemKind::Bool);
    return c.ints;
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(cmp(BinaryOp::Lt), (V{1, 0, 0, 0}));
  EXPECT_EQ(cmp(BinaryOp::Le), (V{1, 0, 1, 1}));
  EXPECT_EQ(cmp(BinaryOp::Gt), (V{0, 0, 0, 0}));
  EXPECT_EQ(cmp(BinaryOp::Ge), (V{0, 0, 1, 1}));
  EXPECT_EQ(cmp(BinaryOp::Eq), (V{0, 0, 1, 1}));
  EXPECT_EQ(cmp(BinaryOp::Ne), (V{1, 1, 0, 0}));
}

TEST(Binary, IntegersStayIntegersUnlessMixedWithReals) {
  const Tensor i = ints(ElemKind::I32, {3}, {7, -7, 3});
  const Tensor j = ints(ElemKind::I64, {3}, {2, 2, 5});
  const Tensor sum = binary(BinaryOp::Add, i, {0}, j, {0}, 1);
  EXPECT_EQ(sum.kind, ElemKind::I64);
  EXPECT_EQ(sum.ints, (std::vector<int64_t>{9, -5, 8}));
  EXPECT_EQ(binary(BinaryOp::Mul, i, {0}, i, {0}, 1).kind, ElemKind::I32);
  EXPECT_EQ(binary(BinaryOp::Max, i, {0}, j, {0}, 1).ints, (std::vector<int64_t>{7, 2, 5}));
  EXPECT_EQ(binary(BinaryOp::Min, i, {0}, j, {0}, 1).ints, (std::vector<int64_t>{2, -7, 3}));
  EXPECT_EQ(binary(BinaryOp::Lt, i, {0}, j, {0}, 1).ints, (std::vector<int64_t>{0, 1, 1}));
  // Div is true division in f64.
  const Tensor q = binary(BinaryOp::Div, i, {0}, j, {0}, 1);
  EXPECT_EQ(q.kind, ElemKind::Real);
  expect_same(q.reals, {3.5, -3.5, 0.6});
  // Mixed with a real: promoted.
  const Tensor m = binary(BinaryOp::Add, i, {0}, Tensor::scalar(0.5), {-1}, 1);
  EXPECT_EQ(m.kind, ElemKind::Real);
  expect_same(m.reals, {7.5, -6.5, 3.5});
}

TEST(Binary, IntegerOverflowIsARuntimeError) {
  const Tensor big = ints(ElemKind::I32, {2, 2}, {0, 0, 0, 2147483647});
  const Tensor one = ints(ElemKind::I32, {}, {1});
  EXPECT_EQ(error_of<RuntimeError>([&] { binary(BinaryOp::Add, big, {0, 1}, one, {-1, -1}, 2); }),
            "add: 2147483647 + 1 at [1, 1] overflows i32");
  const Tensor huge = ints(ElemKind::I64, {1}, {std::numeric_limits<int64_t>::max()});
  EXPECT_THROW(binary(BinaryOp::Mul, huge, {0}, huge, {0}, 1), RuntimeError);
  EXPECT_EQ(binary(BinaryOp::Add, big, {0, 1}, ints(ElemKind::I64, {}, {1}), {-1, -1}, 2).ints.back(), 2147483648);
}

TEST(Binary, BoolsTakeOnlyLogicAndEquality) {
  const Tensor p = ints(ElemKind::Bool, {4}, {0, 0, 1, 1});
  const Tensor q = ints(ElemKind::Bool, {4}, {0, 1, 0, 1});
  EXPECT_EQ(binary(BinaryOp::And, p, {0}, q, {0}, 1).ints, (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(binary(BinaryOp::Or, p, {0}, q, {0}, 1).ints, (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(binary(BinaryOp::Eq, p, {0}, q, {0}, 1).ints, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(binary_result_kind(BinaryOp::Add, ElemKind::Bool, ElemKind::Bool), std::nullopt);
  EXPECT_EQ(binary_result_kind(BinaryOp::And, ElemKind::Real, ElemKind::Real), std::nullopt);
  EXPECT_EQ(binary_result_kind(BinaryOp::Eq, ElemKind::Bool, ElemKind::I32), std::nullopt);
  EXPECT_EQ(binary_result_kind(BinaryOp::Pow, ElemKind::I32, ElemKind::I32), ElemKind::Real);
  EXPECT_THROW(binary(BinaryOp::Add, p, {0}, q, {0}, 1), KernelMisuse);
  EXPECT_THROW(binary(BinaryOp::And, Tensor::scalar(1), {}, Tensor::scalar(1), {}, 0), KernelMisuse);
}

// ---------------------------------------------------------------------------
// Where

TEST(Where, ChoosesAndCopiesExactly) {
  // r[i, j] = cond[j] ? a[i, j] : b[i]
  const Tensor cond = ints(ElemKind::Bool, {3}, {1, 0, 1});
  const Tensor a = reals({2, 3}, {-0.0, kNaN, 3, 4, 5, 6});
  const Tensor b = reals({2}, {-1, -2});
  const Tensor r = where(cond, {-1, 0}, a, {0, 1}, b, {0, -1}, 2);
  EXPECT_EQ(r.shape, (Shape{2, 3}));
  EXPECT_EQ(bits(r.reals[0]), bits(-0.0));
  expect_same(r.reals, {-0.0, -1, 3, 4, -2, 6});
  // An integer branch is promoted when the other is real.
  const Tensor m = where(cond, {0}, ints(ElemKind::I32, {3}, {1, 2, 3}), {0}, Tensor::scalar(0.5), {-1}, 1);
  EXPECT_EQ(m.kind, ElemKind::Real);
  expect_same(m.reals, {1, 0.5, 3});
  const Tensor k = where(cond, {0}, ints(ElemKind::I64, {3}, {1, 2, 3}), {0}, ints(ElemKind::I64, {}, {9}), {-1}, 1);
  EXPECT_EQ(k.ints, (std::vector<int64_t>{1, 9, 3}));
}

TEST(Where, Errors) {
  const Tensor cond = ints(ElemKind::Bool, {3}, {1, 0, 1});
  EXPECT_THROW(where(Tensor::scalar(1.0), {}, Tensor::scalar(1.0), {}, Tensor::scalar(2.0), {}, 0), KernelMisuse);
  EXPECT_THROW(where(cond, {0}, cond, {0}, Tensor::scalar(2.0), {-1}, 1), KernelMisuse);
  EXPECT_EQ(error_of<RuntimeError>([&] {
              where(cond, {0}, reals({2}, {1, 2}), {0}, Tensor::scalar(0.0), {-1}, 1);
            }),
            "where: result axis 0 has size 3 in operand 0 but 2 in operand 1");
}

TEST(Broadcast, ResultShapeAndAlignedStrides) {
  const Tensor a = reals({3, 1}, {1, 2, 3});
  const Tensor b = reals({4}, {1, 2, 3, 4});
  const Tensor c = Tensor::scalar(1.0);
  EXPECT_EQ(broadcast_result_shape({{&a, {1, -1, 0}}, {&b, {-1, 0, -1}}, {&c, {-1, -1, -1}}}, 3), (Shape{1, 4, 3}));
  EXPECT_EQ(broadcast_result_shape({{&c, {-1, -1}}}, 2), (Shape{1, 1}));
  EXPECT_EQ(aligned_strides(a, {1, -1, 0}, {5, 4, 3}), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(aligned_strides(reals({2, 3}, {1, 2, 3, 4, 5, 6}), {1, 0}, {3, 2}), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(error_of<RuntimeError>([&] { aligned_strides(b, {0}, {5}); }),
            "broadcast: axis 0 of the operand has size 4 but result axis 0 has size 5");
}

}  // namespace
}  // namespace quire::runtime
