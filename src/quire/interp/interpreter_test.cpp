// The reference interpreter, value by value: every built-in operation of the
// language on small inputs against an independent computation (plain loops
// over the formulas kernels.h states), broadcasting with `...`, casts and
// their rounding, integers, random draws, stacks, defaults and tuples.

#include "quire/interp/interpreter.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "quire/interp/interp_testing.h"
#include "quire/runtime/elementary.h"
#include "quire/runtime/philox.h"
#include "quire/runtime/random.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::interp {
namespace {

using runtime::ElemKind;
using runtime::Tensor;
using testing::expect_ints;
using testing::expect_near;
using testing::expect_reals;
using testing::ints;
using testing::Program;
using testing::reals;
using testing::tree;

const std::vector<double> kX = {-1.5, -0.0, 0.25, 2.0, 3.5, -4.0};

TEST(Interpret, UnaryBuiltins) {
  Program p(R"(fn neg(x : ℝ[6]) -> ℝ[6] = -x
fn abs_(x : ℝ[6]) -> ℝ[6] = abs(x)
fn exp_(x : ℝ[6]) -> ℝ[6] = exp(x)
fn tanh_(x : ℝ[6]) -> ℝ[6] = tanh(x)
fn erf_(x : ℝ[6]) -> ℝ[6] = erf(x)
fn sigmoid_(x : ℝ[6]) -> ℝ[6] = sigmoid(x)
fn relu_(x : ℝ[6]) -> ℝ[6] = relu(x)
fn gelu_(x : ℝ[6]) -> ℝ[6] = gelu(x)
fn gelu_tanh_(x : ℝ[6]) -> ℝ[6] = gelu_tanh(x)
fn silu_(x : ℝ[6]) -> ℝ[6] = silu(x)
fn log_(x : ℝ[6]) -> ℝ[6] = log(abs(x) + 1.0)
fn sqrt_(x : ℝ[6]) -> ℝ[6] = sqrt(abs(x))
fn rsqrt_(x : ℝ[6]) -> ℝ[6] = rsqrt(abs(x) + 0.5)
fn square(x : ℝ[6]) -> ℝ[6] = x^2
fn cube(x : ℝ[6]) -> ℝ[6] = x^3
)");
  Tensor x = reals({6}, kX);
  auto each = [&](auto f) {
    std::vector<double> out;
    for (double v : kX) out.push_back(f(v));
    return out;
  };
  const double k = 0x1.9884533d43651p-1;  // √(2/π)
  expect_reals(p("neg", {x}), {6}, each([](double v) { return -v; }));
  expect_reals(p("abs_", {x}), {6}, each([](double v) { return std::fabs(v); }));
  expect_reals(p("exp_", {x}), {6}, each([](double v) { return runtime::elementary_exp(v); }));
  expect_reals(p("tanh_", {x}), {6}, each([](double v) { return std::tanh(v); }));
  expect_reals(p("erf_", {x}), {6}, each([](double v) { return runtime::elementary_erf(v); }));
  expect_reals(p("sigmoid_", {x}), {6}, each([](double v) { return 1.0 / (1.0 + runtime::elementary_exp(-v)); }));
  expect_reals(p("relu_", {x}), {6}, each([](double v) { return v > 0.0 ? v : 0.0; }));
  expect_reals(p("gelu_", {x}), {6},
               each([](double v) { return 0.5 * v * (1.0 + runtime::elementary_erf(v * M_SQRT1_2)); }));
  expect_reals(p("gelu_tanh_", {x}), {6},
               each([&](double v) { return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))); }));
  expect_reals(p("silu_", {x}), {6}, each([](double v) { return v * (1.0 / (1.0 + runtime::elementary_exp(-v))); }));
  expect_reals(p("log_", {x}), {6}, each([](double v) { return std::log(std::fabs(v) + 1.0); }));
  expect_reals(p("sqrt_", {x}), {6}, each([](double v) { return std::sqrt(std::fabs(v)); }));
  expect_reals(p("rsqrt_", {x}), {6}, each([](double v) { return 1.0 / std::sqrt(std::fabs(v) + 0.5); }));
  expect_reals(p("square", {x}), {6}, each([](double v) { return v * v; }));
  expect_reals(p("cube", {x}), {6}, each([](double v) { return std::pow(v, 3.0); }));
  // relu(-0.0) is +0.0, -(-0.0) is +0.0.
  EXPECT_FALSE(std::signbit(p("relu_", {x}).reals[1]));
  EXPECT_FALSE(std::signbit(p("neg", {x}).reals[1]));
}

TEST(Interpret, BinaryBuiltinsAndLiterals) {
  Program p(R"(fn arith(x : ℝ[3], y : ℝ[3]) -> ℝ[3] = (x + y) * 2.0 - x / y + x ^ y
fn mm(x : ℝ[3], y : ℝ[3]) -> ℝ[3] = max(x, y) - min(x, 1.0)
fn folded() -> ℝ[] = 2.0 * 3.0 + 1.0 / 4.0
)");
  Tensor x = reals({3}, {1.5, -2.0, 4.0}), y = reals({3}, {0.5, 3.0, -1.25});
  std::vector<double> want, mmw;
  for (int i = 0; i < 3; ++i) {
    double a = x.reals[i], b = y.reals[i];
    want.push_back((a + b) * 2.0 - a / b + std::pow(a, b));
    mmw.push_back(std::max(a, b) - std::min(a, 1.0));
  }
  expect_reals(p("arith", {x, y}), {3}, want);
  expect_reals(p("mm", {x, y}), {3}, mmw);
  expect_reals(p("folded", {}), {}, {6.25});
}

TEST(Interpret, BroadcastingByNameByPositionAndWithEllipsis) {
  Program p(R"(fn transposed(x : ℝ[a: 2, b: 3], y : ℝ[b: 3, a: 2]) -> ℝ[a: 2, b: 3] = x + y
fn stretch(x : ℝ[1, 3], y : ℝ[2, 1]) -> ℝ[2, 3] = x * y
fn right(x : ℝ[2, 3], y : ℝ[3]) -> ℝ[2, 3] = x - y
fn norm(x : ℝ[..., model: 3]) -> ℝ[..., model: 3] = x / mean(axis model, x)
fn scale(x : ℝ[..., model: 3], g : ℝ[model: 3]) -> ℝ[..., model: 3] = x * g
fn outer(x : ℝ[..., 3], y : ℝ[2, 3]) -> ℝ[..., 2, 3] = x + y
fn caller(x : ℝ[batch: 2, 2, model: 3]) -> ℝ[batch: 2, 2, model: 3] = norm(x)
)");
  Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6}), bt = reals({3, 2}, {10, 40, 20, 50, 30, 60});
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(a.reals[i * 3 + j] + bt.reals[j * 2 + i]);
  expect_reals(p("transposed", {a, bt}), {2, 3}, want);

  Tensor r = reals({1, 3}, {1, 2, 3}), c = reals({2, 1}, {10, 100});
  expect_reals(p("stretch", {r, c}), {2, 3}, {10, 20, 30, 100, 200, 300});
  expect_reals(p("right", {a, reals({3}, {1, 2, 3})}), {2, 3}, {0, 0, 0, 3, 3, 3});

  // x / mean(axis model, x) over two leading axes bound to `...`.
  Tensor x = reals({2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, 0, 7, 2, 2, 2});
  std::vector<double> nw;
  for (int row = 0; row < 4; ++row) {
    double s = 0.0;
    for (int j = 0; j < 3; ++j) s = s + x.reals[row * 3 + j];
    double m = s / 3.0;
    for (int j = 0; j < 3; ++j) nw.push_back(x.reals[row * 3 + j] / m);
  }
  expect_reals(p("norm", {x}), {2, 2, 3}, nw);
  expect_reals(p("caller", {x}), {2, 2, 3}, nw);

  std::vector<double> sw;
  for (int i = 0; i < 12; ++i) sw.push_back(x.reals[i] * std::vector<double>{2, 3, 5}[i % 3]);
  expect_reals(p("scale", {x, reals({3}, {2, 3, 5})}), {2, 2, 3}, sw);

  // `...` lines up with `...`: x's leading axis is not the 2 of y.
  Tensor v = reals({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor y = reals({2, 3}, {100, 200, 300, 400, 500, 600});
  std::vector<double> ow;
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) ow.push_back(v.reals[l * 3 + j] + y.reals[i * 3 + j]);
  expect_reals(p("outer", {v, y}), {4, 2, 3}, ow);
}

TEST(Interpret, ReductionsOverNamedAxesAndOverAll) {
  Program p(R"(fn s(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = sum(axis m, x)
fn sb(x : ℝ[b: 2, m: 3]) -> ℝ[m: 3] = sum(axis b, x)
fn m(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = mean(axis m, x)
fn mx(x : ℝ[b: 2, m: 3]) -> ℝ[m: 3] = max(axis b, x)
fn mn(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = min(axis m, x)
fn lse(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = logsumexp(axis m, x)
fn all(x : ℝ[b: 2, m: 3]) -> ℝ[] = sum(x) + mean(x) * max(x) - min(x) + logsumexp(axis b, axis m, x)
fn both(x : ℝ[b: 2, m: 3]) -> ℝ[] = sum(axis m, axis b, x)
fn rest(x : ℝ[..., m: 3]) -> ℝ[...] = sum(axis m, x)
fn restall(x : ℝ[..., m: 3]) -> ℝ[] = max(x)
fn isum(i : i32[b: 2, m: 3]) -> i32[b: 2] = sum(axis m, i)
fn imax(i : i32[b: 2, m: 3]) -> i32[] = max(i)
)");
  std::vector<double> v = {0.5, -1.0, 2.25, 3.0, 1e-3, -7.5};
  Tensor x = reals({2, 3}, v);
  auto row_sum = [&](int b) { return ((0.0 + v[b * 3]) + v[b * 3 + 1]) + v[b * 3 + 2]; };
  expect_reals(p("s", {x}), {2}, {row_sum(0), row_sum(1)});
  expect_reals(p("sb", {x}), {3}, {(0.0 + v[0]) + v[3], (0.0 + v[1]) + v[4], (0.0 + v[2]) + v[5]});
  expect_reals(p("m", {x}), {2}, {row_sum(0) / 3.0, row_sum(1) / 3.0});
  expect_reals(p("mx", {x}), {3}, {3.0, 1e-3, 2.25});
  expect_reals(p("mn", {x}), {2}, {-1.0, -7.5});
  auto lse = [&](int b) {
    double mm = std::max({v[b * 3], v[b * 3 + 1], v[b * 3 + 2]});
    double s = 0.0;
    for (int j = 0; j < 3; ++j) s = s + runtime::elementary_exp(v[b * 3 + j] - mm);
    return mm + std::log(s);
  };
  expect_reals(p("lse", {x}), {2}, {lse(0), lse(1)});
  double total = 0.0;
  for (double e : v) total = total + e;
  double big = *std::max_element(v.begin(), v.end()), small = *std::min_element(v.begin(), v.end());
  double all_lse = 0.0;
  for (double e : v) all_lse = all_lse + runtime::elementary_exp(e - big);
  all_lse = big + std::log(all_lse);
  expect_reals(p("all", {x}), {}, {total + total / 6.0 * big - small + all_lse});
  expect_reals(p("both", {x}), {}, {total});
  Tensor r = reals({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  expect_reals(p("rest", {r}), {2, 2}, {6, 15, 24, 33});
  expect_reals(p("restall", {r}), {}, {12});
  Tensor i = ints(ElemKind::I32, {2, 3}, {1, -2, 3, 40, 50, -60});
  expect_ints(p("isum", {i}), ElemKind::I32, {2}, {2, 30});
  expect_ints(p("imax", {i}), ElemKind::I32, {}, {50});
}

TEST(Interpret, DotWithLeadingAxesAndMatmul) {
  Program p(R"(fn d(x : ℝ[2, 3, 4], w : ℝ[4, 5]) -> ℝ[2, 3, 5] = x · w
fn v(x : ℝ[2, 4], w : ℝ[4]) -> ℝ[2] = x · w
fn m(x : ℝ[..., 4], w : ℝ[4, 5]) -> ℝ[..., 5] = matmul(x, w, out = f32)
fn i(x : ℝ[4], w : ℝ[4]) -> ℝ[] = dot(x, w)
)");
  std::vector<double> xv(24), wv(20);
  for (int k = 0; k < 24; ++k) xv[k] = 0.1 * k - 1.0;
  for (int k = 0; k < 20; ++k) wv[k] = 1.0 / (k + 1);
  Tensor x = reals({2, 3, 4}, xv), w = reals({4, 5}, wv);
  std::vector<double> want;
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 5; ++c) {
      double acc = 0.0;
      for (int k = 0; k < 4; ++k) acc = acc + xv[r * 4 + k] * wv[k * 5 + c];
      want.push_back(acc);
    }
  expect_reals(p("d", {x, w}), {2, 3, 5}, want);
  expect_reals(p("m", {x, w}), {2, 3, 5}, want);  // the f64 reference keeps every bit
  Tensor x2 = reals({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), w1 = reals({4}, {0.5, -1, 2, 0.25});
  expect_reals(p("v", {x2, w1}), {2}, {0.5 - 2 + 6 + 1, 2.5 - 6 + 14 + 2});
  expect_reals(p("i", {reals({4}, {1, 2, 3, 4}), w1}), {}, {0.5 - 2 + 6 + 1});
}

TEST(Interpret, ContractWithBatchAxes) {
  Program p(R"(fn c(a : ℝ[b: 2, k: 3, i: 2], c : ℝ[b: 2, k: 3, j: 4]) -> ℝ[b: 2, i: 2, j: 4] = contract(axis k, a, c)
fn plain(a : ℝ[i: 2, k: 3], c : ℝ[k: 3, j: 2]) -> ℝ[i: 2, j: 2] = contract(axis k, a, c)
fn lead(a : ℝ[..., k: 3], c : ℝ[k: 3, j: 2]) -> ℝ[..., j: 2] = contract(axis k, a, c)
)");
  std::vector<double> av(12), cv(24);
  for (int n = 0; n < 12; ++n) av[n] = n * 0.5 - 2.0;
  for (int n = 0; n < 24; ++n) cv[n] = 3.0 - n * 0.25;
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) {
        double acc = 0.0;
        for (int k = 0; k < 3; ++k) acc = acc + av[b * 6 + k * 2 + i] * cv[b * 12 + k * 4 + j];
        want.push_back(acc);
      }
  expect_reals(p("c", {reals({2, 3, 2}, av), reals({2, 3, 4}, cv)}), {2, 2, 4}, want);
  Tensor a = reals({2, 3}, {1, 2, 3, 4, 5, 6}), c = reals({3, 2}, {1, 0, 0, 1, 1, 1});
  expect_reals(p("plain", {a, c}), {2, 2}, {4, 5, 10, 11});
  expect_reals(p("lead", {reals({2, 2, 3}, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}), c}), {2, 2, 2},
               {4, 5, 10, 11, 4, 5, 10, 11});
}

TEST(Interpret, Restructuring) {
  Program p(R"(fn sp(x : ℝ[a: 6]) -> ℝ[p: 2, q: 3] = split(axis a, x, p: 2, q: 3)
fn me(x : ℝ[p: 2, q: 3]) -> ℝ[r: 6] = merge(axis q, axis p, x, r: 6)
fn me2(x : ℝ[z: 2, p: 2, q: 3]) -> ℝ[z: 2, r: 6] = merge(axis p, axis q, x, r: 6)
fn tr(x : ℝ[a: 2, b: 3]) -> ℝ[b: 3, a: 2] = transpose(x, axis a, axis b)
fn trr(x : ℝ[..., a: 2, b: 3]) -> ℝ[..., b: 3, a: 2] = transpose(x, axis b, axis a)
fn cc(x : ℝ[a: 2, b: 2], y : ℝ[a: 1, b: 2], z : ℝ[a: 2, b: 2]) -> ℝ[a: 5, b: 2] = concat(axis a, x, y, z)
fn cb(x : ℝ[a: 2, b: 2], y : ℝ[a: 2, b: 1]) -> ℝ[a: 2, b: 3] = concat(axis b, x, y)
fn sl(x : ℝ[a: 7]) -> ℝ[a: 3] = slice(axis a, x, 1, 6, 2)
fn sl2(x : ℝ[r: 2, a: 7]) -> ℝ[r: 2, a: 2] = slice(axis a, x, 5, 7)
fn g0(t : ℝ[v: 4, 2], ids : i32[3]) -> ℝ[3, 2] = gather(axis v, t, ids)
fn g1(t : ℝ[2, v: 4], ids : i32[3]) -> ℝ[2, 3] = gather(axis v, t, ids)
fn gr(t : ℝ[v: 4, 2], ids : i32[..., 2]) -> ℝ[..., 2, 2] = gather(t, ids)
fn oh(ids : i32[3]) -> ℝ[3, v: 4] = one_hot(ids, v: 4)
)");
  std::vector<double> six = {0, 1, 2, 3, 4, 5};
  expect_reals(p("sp", {reals({6}, six)}), {2, 3}, six);
  // merge(axis q, axis p): row-major over (q, p): r[q·2 + p] = x[p, q].
  expect_reals(p("me", {reals({2, 3}, six)}), {6}, {0, 3, 1, 4, 2, 5});
  std::vector<double> twelve = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  expect_reals(p("me2", {reals({2, 2, 3}, twelve)}), {2, 6}, twelve);
  expect_reals(p("tr", {reals({2, 3}, six)}), {3, 2}, {0, 3, 1, 4, 2, 5});
  expect_reals(p("trr", {reals({2, 2, 3}, twelve)}), {2, 3, 2}, {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11});
  expect_reals(p("cc", {reals({2, 2}, {1, 2, 3, 4}), reals({1, 2}, {5, 6}), reals({2, 2}, {7, 8, 9, 10})}), {5, 2},
               {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  expect_reals(p("cb", {reals({2, 2}, {1, 2, 3, 4}), reals({2, 1}, {9, 8})}), {2, 3}, {1, 2, 9, 3, 4, 8});
  expect_reals(p("sl", {reals({7}, {0, 10, 20, 30, 40, 50, 60})}), {3}, {10, 30, 50});
  expect_reals(p("sl2", {reals({2, 7}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})}), {2, 2}, {5, 6, 12, 13});
  Tensor table = reals({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  Tensor ids = ints(ElemKind::I32, {3}, {3, 0, 3});
  expect_reals(p("g0", {table, ids}), {3, 2}, {30, 31, 0, 1, 30, 31});
  expect_reals(p("g1", {reals({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13}), ids}), {2, 3}, {3, 0, 3, 13, 10, 13});
  Tensor ids2 = ints(ElemKind::I32, {2, 2}, {1, 2, 3, 0});
  expect_reals(p("gr", {table, ids2}), {2, 2, 2}, {10, 11, 20, 21, 30, 31, 0, 1});
  expect_reals(p("oh", {ids}), {3, 4}, {0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1});
}

TEST(Interpret, IdsOutOfRangeAreErrorsNamingTheSite) {
  Program p(R"(fn g(t : ℝ[v: 4, 2], ids : i32[3]) -> ℝ[3, 2] = gather(axis v, t, ids)
fn oh(ids : i32[3]) -> ℝ[3, v: 4] = one_hot(ids, v: 4)
)");
  Tensor ids = ints(ElemKind::I32, {3}, {0, 4, 1});
  try {
    p("g", {reals({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), ids});
    ADD_FAILURE() << "no error";
  } catch (const EvalError& e) {
    EXPECT_EQ(std::string(e.what()),
              "main.qr:1:49: in g/%3: gather: id 4 at [1] is outside the table's axis 0 of size 4");
  }
  EXPECT_THROW(p("oh", {ids}), EvalError);
}

TEST(Interpret, WhereComparisonsAndNot) {
  Program p(R"(fn w(x : ℝ[4], y : ℝ[4]) -> ℝ[4] = where(x > y, x, y * 10.0)
fn cmp(x : ℝ[4], y : ℝ[4]) -> (bool[4], bool[4], bool[4], bool[4], bool[4], bool[4]) =
  (x < y, x ≤ y, x > y, x ≥ y, x == y, x ≠ y)
fn n(x : ℝ[4]) -> bool[4] = not(x > 0.0)
fn b(x : ℝ[4]) -> bool[4] = (x > 0.0) == true
fn wb(x : ℝ[4]) -> ℝ[4] = where(x > 0.0, 1.0, -1.0)
fn wbool(x : ℝ[4]) -> bool[4] = where(x > 0.0, x > 2.0, false)
)");
  Tensor x = reals({4}, {1, 2, 3, -4}), y = reals({4}, {2, 2, 1, -5});
  expect_reals(p("w", {x, y}), {4}, {20, 20, 3, -4});
  Value c = p.call("cmp", {Value::of(x), Value::of(y)});
  ASSERT_EQ(c.elements.size(), 6u);
  expect_ints(c.elements[0].tensor, ElemKind::Bool, {4}, {1, 0, 0, 0});
  expect_ints(c.elements[1].tensor, ElemKind::Bool, {4}, {1, 1, 0, 0});
  expect_ints(c.elements[2].tensor, ElemKind::Bool, {4}, {0, 0, 1, 1});
  expect_ints(c.elements[3].tensor, ElemKind::Bool, {4}, {0, 1, 1, 1});
  expect_ints(c.elements[4].tensor, ElemKind::Bool, {4}, {0, 1, 0, 0});
  expect_ints(c.elements[5].tensor, ElemKind::Bool, {4}, {1, 0, 1, 1});
  expect_ints(p("n", {x}), ElemKind::Bool, {4}, {0, 0, 0, 1});
  expect_ints(p("b", {x}), ElemKind::Bool, {4}, {1, 1, 1, 0});
  expect_reals(p("wb", {x}), {4}, {1, 1, 1, -1});
  expect_ints(p("wbool", {x}), ElemKind::Bool, {4}, {0, 0, 1, 0});
}

TEST(Interpret, HostBooleansAndBooleanConstants) {
  Program p(R"(const FLAG : bool = false
fn f(x : ℝ[3], flag : bool) -> ℝ[3] = where(flag, x, 0.0) + real(flag) + where(FLAG, x, -x)
fn g(x : ℝ[3], flag : bool) -> bool[3] = (x > 0.0) == flag
)");
  Tensor x = reals({3}, {1, -2, 3});
  expect_reals(p.call("f", {Value::of(x), Value::of_host(1)}).tensor, {3}, {1 + 1 - 1, -2 + 1 + 2, 3 + 1 - 3});
  expect_reals(p.call("f", {Value::of(x), Value::of_host(0)}).tensor, {3}, {0 + 0 - 1, 0 + 0 + 2, 0 + 0 - 3});
  expect_ints(p.call("g", {Value::of(x), Value::of_host(1)}).tensor, ElemKind::Bool, {3}, {1, 0, 1});
}

TEST(Interpret, CastsRoundToTheTargetFormat) {
  Program p(R"(fn bf(x : ℝ[n: 6]) -> ℝ[n: 6] = x as bf16
fn h(x : ℝ[n: 6]) -> ℝ[n: 6] = x as f16
fn s(x : ℝ[n: 6]) -> ℝ[n: 6] = x as f32
fn same(x : ℝ[n: 6]) -> ℝ[n: 6] = x as f64 as ℝ
fn i(x : ℝ[n: 6]) -> i32[n: 6] = x as i32
fn l(x : ℝ[n: 6]) -> i64[n: 6] = x as i64
fn b(x : ℝ[n: 6]) -> bool[n: 6] = x as bool
fn back(i : i32[n: 3]) -> ℝ[n: 3] = i as ℝ
fn twice(x : ℝ[n: 6]) -> ℝ[n: 6] = x as bf16 as bf16
)");
  auto two = [](int e) { return std::ldexp(1.0, e); };
  // bf16 keeps 8 significant bits: at 1 the spacing is 2^-7.
  Tensor xb = reals({6}, {1 + two(-9), 1 + 3 * two(-9), 1 + two(-8), 1 + 3 * two(-8), -(1 + 3 * two(-9)), 3e38});
  expect_reals(p("bf", {xb}), {6},
               {1.0, 1 + two(-7), 1.0 /* tie, to even */, 1 + two(-6) /* tie, to even */, -(1 + two(-7)),
                std::ldexp(0x1.c4p0, 127) /* 3e38 = 0x1.c3...p+127 */});
  // f16 keeps 11 bits, spacing 2^-10 at 1; its largest finite value is 65504.
  Tensor xh = reals({6}, {1 + two(-11), 1 + 3 * two(-11), 65519.0, 65520.0, two(-24), two(-25)});
  expect_reals(p("h", {xh}), {6}, {1.0, 1 + two(-9), 65504.0, INFINITY, two(-24), 0.0});
  // f32 keeps 24 bits.
  Tensor xs = reals({6}, {1 + two(-24), 1 + two(-23), 1 + 3 * two(-24), 0.1, -0.0, two(-149) * 0.75});
  expect_reals(p("s", {xs}), {6}, {1.0, 1 + two(-23), 1 + two(-22), static_cast<double>(0.1f), -0.0, two(-149)});
  expect_reals(p("same", {xs}), {6}, xs.reals);
  expect_reals(p("twice", {xb}), {6}, p("bf", {xb}).reals);
  Tensor xi = reals({6}, {2.7, -2.7, 0.0, -0.5, 1e9, 7.0});
  expect_ints(p("i", {xi}), ElemKind::I32, {6}, {2, -2, 0, 0, 1000000000, 7});
  expect_ints(p("l", {xi}), ElemKind::I64, {6}, {2, -2, 0, 0, 1000000000, 7});
  expect_ints(p("b", {xi}), ElemKind::Bool, {6}, {1, 1, 0, 1, 1, 1});
  expect_reals(p("back", {ints(ElemKind::I32, {3}, {-3, 0, 2147483647})}), {3}, {-3, 0, 2147483647.0});
  // Out of the i32 range is an error, not a wrapped value.
  EXPECT_THROW(p("i", {reals({6}, {3e9, 0, 0, 0, 0, 0})}), EvalError);
}

TEST(Interpret, BfloatRoundingOfTheLargestValues) {
  // 3e38 in bf16: the value is 0x1.c3663...p+127; 8 bits keep 0x1.c4p+127.
  Program p("fn bf(x : ℝ[]) -> ℝ[] = x as bf16\n");
  EXPECT_TRUE(testing::same_bits(p("bf", {Tensor::scalar(3e38)}).reals[0], std::ldexp(0x1.c4p0, 127)));
  EXPECT_TRUE(testing::same_bits(p("bf", {Tensor::scalar(1e39)}).reals[0], INFINITY));
}

TEST(Interpret, IntegerArithmetic) {
  Program p(R"(fn a(i : i32[3], j : i32[3]) -> i32[3] = i + j * j - i
fn n(i : i32[3]) -> i32[3] = -abs(i)
fn d(i : i32[3], j : i32[3]) -> ℝ[3] = i / j
fn mixed(i : i32[3], x : ℝ[3]) -> ℝ[3] = i * x + 1
fn big(i : i64[2], j : i32[2]) -> i64[2] = i + j
fn ovf(i : i32[1]) -> i32[1] = i + i
)");
  Tensor i = ints(ElemKind::I32, {3}, {7, -3, 0}), j = ints(ElemKind::I32, {3}, {2, 4, -5});
  expect_ints(p("a", {i, j}), ElemKind::I32, {3}, {4, 16, 25});
  expect_ints(p("n", {i}), ElemKind::I32, {3}, {-7, -3, 0});
  expect_reals(p("d", {i, j}), {3}, {3.5, -0.75, -0.0});
  expect_reals(p("mixed", {i, reals({3}, {0.5, 2, 1})}), {3}, {4.5, -5, 1});
  expect_ints(p("big", {ints(ElemKind::I64, {2}, {int64_t{1} << 40, -1}), ints(ElemKind::I32, {2}, {1, 2})}),
              ElemKind::I64, {2}, {(int64_t{1} << 40) + 1, 1});
  try {
    p("ovf", {ints(ElemKind::I32, {1}, {2147483647})});
    ADD_FAILURE() << "no overflow reported";
  } catch (const EvalError& e) {
    EXPECT_NE(std::string(e.what()).find("in ovf/%2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
}

/// uniform01 of element `i` under `k` (random.h's formula, from Philox itself).
double uniform01(runtime::Key k, uint64_t i) {
  auto w = runtime::philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 1u}, {k.k0, k.k1});
  uint64_t bits = (static_cast<uint64_t>(w[0]) << 21) ^ (w[1] >> 11);
  return static_cast<double>(bits) * std::ldexp(1.0, -53);
}

TEST(Interpret, RandomDrawsAreDeterministicPerKeyAndDifferAfterSplit) {
  Program p(R"(fn u(k : key) -> ℝ[a: 2, b: 3] = uniform(k, a: 2, b: 3, low = -1.0, high = 3.0)
fn two(k : key) -> (ℝ[n: 4], ℝ[n: 4]) =
  let (k1, k2) = split(k)
  (uniform(k1, n: 4), uniform(k2, n: 4))
fn nrm(k : key) -> ℝ[n: 5] = normal(k, n: 5, mean = 1.0, std = 0.5)
fn bern(k : key) -> bool[n: 64] = bernoulli(k, 0.25, n: 64)
fn edge(k : key) -> (bool[n: 8], bool[n: 8]) = (bernoulli(k, 0.0, n: 8), bernoulli(k, 1.0, n: 8))
)");
  runtime::Key k{12345, 678};
  Value key = Value::of_key(k);
  Tensor a = p.call("u", {key}).tensor;
  std::vector<double> want;
  for (uint64_t i = 0; i < 6; ++i) want.push_back(-1.0 + (3.0 - -1.0) * uniform01(k, i));
  expect_reals(a, {2, 3}, want);
  expect_reals(p.call("u", {key}).tensor, {2, 3}, want);  // same key, same bits

  Value t = p.call("two", {key});
  auto [k1, k2] = runtime::split_key(k);
  std::vector<double> w1, w2;
  for (uint64_t i = 0; i < 4; ++i) {
    w1.push_back(0.0 + (1.0 - 0.0) * uniform01(k1, i));
    w2.push_back(0.0 + (1.0 - 0.0) * uniform01(k2, i));
  }
  expect_reals(t.elements[0].tensor, {4}, w1);
  expect_reals(t.elements[1].tensor, {4}, w2);
  EXPECT_NE(t.elements[0].tensor.reals, t.elements[1].tensor.reals);

  std::vector<double> nw;
  for (uint64_t i = 0; i < 5; ++i) nw.push_back(runtime::normal_at(k, i, 1.0, 0.5));
  expect_reals(p.call("nrm", {key}).tensor, {5}, nw);

  Tensor b = p.call("bern", {key}).tensor;
  ASSERT_EQ(b.kind, ElemKind::Bool);
  int ones = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    auto w = runtime::philox4x32_10({static_cast<uint32_t>(i), 0u, 0u, 3u}, {k.k0, k.k1});
    double u = static_cast<double>((static_cast<uint64_t>(w[0]) << 21) ^ (w[1] >> 11)) * std::ldexp(1.0, -53);
    EXPECT_EQ(b.ints[i], u < 0.25 ? 1 : 0) << i;
    ones += static_cast<int>(b.ints[i]);
  }
  EXPECT_GT(ones, 4);
  EXPECT_LT(ones, 30);
  Value e = p.call("edge", {key});
  EXPECT_EQ(e.elements[0].tensor.ints, std::vector<int64_t>(8, 0));
  EXPECT_EQ(e.elements[1].tensor.ints, std::vector<int64_t>(8, 1));
}

TEST(Interpret, ADrawLikeATensorIsTheDrawOfItsSpelledOutShape) {
  Program p(R"(fn like(k : key, x : ℝ[..., c: 3, d: 4]) -> (bool[..., c: 3, d: 4], ℝ[..., c: 3, d: 4], ℝ[..., c: 3, d: 4]) =
  (bernoulli(k, 0.5, like = x), uniform(k, like = x, low = -1.0, high = 1.0), normal(k, like = x, std = 2.0))
fn spelled(k : key) -> (bool[b: 2, c: 3, d: 4], ℝ[b: 2, c: 3, d: 4], ℝ[b: 2, c: 3, d: 4]) =
  (bernoulli(k, 0.5, b: 2, c: 3, d: 4), uniform(k, b: 2, c: 3, d: 4, low = -1.0, high = 1.0),
   normal(k, b: 2, c: 3, d: 4, std = 2.0))
)");
  const Value k = Value::of_key(runtime::Key{5, 8});
  const Value a = p.call("like", {k, Value::of(Tensor::real({2, 3, 4}))});
  const Value b = p.call("spelled", {k});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.elements[i].tensor.shape, (runtime::Shape{2, 3, 4}));
    if (i == 0) EXPECT_EQ(a.elements[i].tensor.ints, b.elements[i].tensor.ints);
    else expect_reals(a.elements[i].tensor, {2, 3, 4}, b.elements[i].tensor.reals);
  }
  auto both = elab::testing::elaborate_text("fn f(k : key, x : ℝ[b: 2]) -> bool[b: 2] = bernoulli(k, 0.5, b: 2, like = x)\n");
  EXPECT_TRUE(both->has_error("E0405", 1, 62, "`bernoulli` takes its shape from `like =` or from `name: size` arguments, not both"))
      << both->rendered();
}

TEST(Interpret, DropoutFromTheTutorial) {
  Program p(R"(dim B
fn dropout(k : key, x : ℝ[batch: B, model: 4], p : f64 = 0.5) -> ℝ[batch: B, model: 4] =
  let keep = bernoulli(k, 1.0 - real(p), batch: B, model: 4)
  where(keep, x / (1.0 - real(p)), 0.0)
)",
            {{"B", 2}});
  runtime::Key k{7, 9};
  Tensor x = reals({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Value host = Value::of_host(0.5);
  Tensor r = p.call("dropout", {Value::of_key(k), Value::of(x), host}).tensor;
  for (uint64_t i = 0; i < 8; ++i)
    EXPECT_TRUE(testing::same_bits(r.reals[i], runtime::bernoulli_at(k, i, 1.0 - 0.5) ? x.reals[i] / 0.5 : 0.0)) << i;
}

const char* kStack = R"(module B {
  param w : ℝ[m: 4]  init = normal(1.0)
  param c : ℝ[]      init = uniform(-1, 1)
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = tanh(x * w) + c
}
module T {
  use bs : stack{3}(B)
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = bs.apply(x)
}
)";

TEST(Interpret, AStackOfThreeEqualsThreeExplicitCalls) {
  Program p(kStack);
  ParamMap stacked = p.params("T", 11);
  ASSERT_EQ(stacked.at("bs.w").shape, (runtime::Shape{3, 4}));
  ASSERT_EQ(stacked.at("bs.c").shape, (runtime::Shape{3}));
  Tensor x = reals({2, 4}, {0.5, -1, 2, 0.25, 1, 1, -3, 0});
  Tensor folded = p.call("T.apply", {testing::tree(stacked), Value::of(x)}).tensor;
  // By hand: copy i of each leaf, then B.apply three times.
  Tensor acc = x;
  for (int i = 0; i < 3; ++i) {
    ParamMap copy;
    copy["w"] = reals({4}, std::vector<double>(stacked.at("bs.w").reals.begin() + 4 * i,
                                               stacked.at("bs.w").reals.begin() + 4 * i + 4));
    copy["c"] = Tensor::scalar(stacked.at("bs.c").reals[i]);
    acc = p.call("B.apply", {tree(copy), Value::of(acc)}).tensor;
  }
  expect_reals(folded, {2, 4}, acc.reals);
  // A stacked tree passed explicitly folds the same way.
  Program q(std::string(kStack) + "fn f(θ : params stack{3}(B), x : ℝ[2, m: 4]) -> ℝ[2, m: 4] = B.apply(θ, x)\n");
  ParamMap bare;
  for (const auto& [path, t] : stacked) bare[path.substr(3)] = t;  // "bs.w" → "w"
  expect_reals(q.call("f", {tree(bare), Value::of(x)}).tensor, {2, 4}, acc.reals);
  // And by formula.
  std::vector<double> want = x.reals.to_vector();
  for (int i = 0; i < 3; ++i)
    for (int e = 0; e < 8; ++e)
      want[e] = std::tanh(want[e] * stacked.at("bs.w").reals[4 * i + e % 4]) + stacked.at("bs.c").reals[i];
  expect_reals(folded, {2, 4}, want);
}

// A stack whose blocks take a mask, a key and a host scalar besides x.
const char* kStackWithArguments = R"(module C {
  param w : ℝ[m: 4]  init = normal(1.0)
  fn apply(x : ℝ[..., m: 4], keep : bool[m: 4], k : key, s : f64) -> ℝ[..., m: 4] =
    where(keep, x * w, x) + sum(uniform(k, u: 1)) * real(s)
}
module S {
  use cs : stack{3}(C)
  fn apply(x : ℝ[..., m: 4], keep : bool[m: 4], k : key) -> ℝ[..., m: 4] = cs.apply(x, keep, k, 0.5)
}
fn loss(θ : params S, x : ℝ[2, m: 4], keep : bool[m: 4], k : key) -> ℝ[] = sum(S.apply(θ, x, keep, k))
fn stacked_grad(θ : params S, x : ℝ[2, m: 4], keep : bool[m: 4], k : key) -> params S = grad(loss)(θ, x, keep, k)
fn unrolled(θ0 : params C, θ1 : params C, θ2 : params C, x : ℝ[2, m: 4], keep : bool[m: 4],
            k0 : key, k1 : key, k2 : key) -> ℝ[] =
  sum(C.apply(θ2, C.apply(θ1, C.apply(θ0, x, keep, k0, 0.5), keep, k1, 0.5), keep, k2, 0.5))
fn grad0(θ0 : params C, θ1 : params C, θ2 : params C, x : ℝ[2, m: 4], keep : bool[m: 4],
         k0 : key, k1 : key, k2 : key) -> params C = grad(unrolled, wrt = θ0)(θ0, θ1, θ2, x, keep, k0, k1, k2)
fn grad1(θ0 : params C, θ1 : params C, θ2 : params C, x : ℝ[2, m: 4], keep : bool[m: 4],
         k0 : key, k1 : key, k2 : key) -> params C = grad(unrolled, wrt = θ1)(θ0, θ1, θ2, x, keep, k0, k1, k2)
fn grad2(θ0 : params C, θ1 : params C, θ2 : params C, x : ℝ[2, m: 4], keep : bool[m: 4],
         k0 : key, k1 : key, k2 : key) -> params C = grad(unrolled, wrt = θ2)(θ0, θ1, θ2, x, keep, k0, k1, k2)
)";

TEST(Interpret, AStackPassesItsFurtherArgumentsToEveryCopyAndEachCopyItsOwnKey) {
  Program p(kStackWithArguments);
  ParamMap stacked = p.params("S", 5);
  ASSERT_EQ(stacked.at("cs.w").shape, (runtime::Shape{3, 4}));
  const Tensor x = reals({2, 4}, {0.5, -1, 2, 0.25, 1, 1, -3, 0});
  const Value keep = Value::of(ints(ElemKind::Bool, {4}, {1, 0, 1, 1}));
  const runtime::Key k{0x1234, 0x5678};
  // By hand: copy i of the parameters, the same mask and scalar, copy_key(k, i).
  std::vector<Value> copies;
  for (int i = 0; i < 3; ++i) {
    ParamMap copy;
    copy["w"] = reals({4}, std::vector<double>(stacked.at("cs.w").reals.begin() + 4 * i,
                                               stacked.at("cs.w").reals.begin() + 4 * i + 4));
    copies.push_back(tree(copy));
  }
  std::vector<Value> unrolled_args = copies;
  unrolled_args.push_back(Value::of(x));
  unrolled_args.push_back(keep);
  for (int i = 0; i < 3; ++i) unrolled_args.push_back(Value::of_key(runtime::copy_key(k, i)));
  const std::vector<Value> args{tree(stacked), Value::of(x), keep, Value::of_key(k)};
  const Tensor loss = p.call("loss", args).tensor;
  const Tensor want = p.call("unrolled", unrolled_args).tensor;
  ASSERT_EQ(loss.size(), 1);
  EXPECT_TRUE(testing::same_bits(loss.reals[0], want.reals[0]));
  // The copies drew apart: copy 0's key is not the stack's.
  EXPECT_NE(runtime::copy_key(k, 0), k);
  // The gradient of the fold, copy by copy, is the unrolled calls' gradient.
  const ParamMap grads = *p.call("stacked_grad", args).params;
  const Tensor& g = grads.at("cs.w");
  ASSERT_EQ(g.shape, (runtime::Shape{3, 4}));
  for (int i = 0; i < 3; ++i) {
    const Tensor gi = p.call(fmt::format("grad{}", i), unrolled_args).params->at("w");
    for (int e = 0; e < 4; ++e)
      EXPECT_TRUE(testing::same_bits(g.reals[static_cast<size_t>(4 * i + e)], gi.reals[static_cast<size_t>(e)]))
          << "copy " << i << " element " << e;
  }
  // A masked element's weight gets no gradient.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.reals[static_cast<size_t>(4 * i + 1)], 0.0);
}

TEST(Interpret, StacksOfModulesWithDimensions) {
  Program p(R"(dim B
module Cell{H : dim} {
  param w : ℝ[H]  init = ones
  fn apply(x : ℝ[..., H]) -> ℝ[..., H] = x * w + 1.0
}
module Net{L : dim} {
  use cells : stack{L}(Cell{4})
  fn apply(x : ℝ[batch: B, 4]) -> ℝ[batch: B, 4] = cells.apply(x)
}
module Top {
  use net : Net{3}
  fn apply(x : ℝ[batch: B, 4]) -> ℝ[batch: B, 4] = net.apply(x)
}
)",
            {{"B", 2}});
  ParamMap params = p.params("Top");
  ASSERT_EQ(params.at("net.cells.w").shape, (runtime::Shape{3, 4}));
  Tensor x = reals({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_reals(p.call("Top.apply", {tree(params), Value::of(x)}).tensor, {2, 4}, {3, 4, 5, 6, 7, 8, 9, 10});
}

TEST(Interpret, DefaultArgumentsAndTuples) {
  Program p(R"(fn scale(x : ℝ[3], s : f64 = 2.0, t : ℝ[] = 0.5) -> ℝ[3] = x * real(s) + t
fn dflt(x : ℝ[3]) -> ℝ[3] = scale(x)
fn expl(x : ℝ[3]) -> ℝ[3] = scale(x, 2.0, 0.5)
fn kw(x : ℝ[3]) -> ℝ[3] = scale(x, t = -1.0)
fn pair(x : ℝ[3]) -> (ℝ[3], (ℝ[], ℝ[3])) = (x, (sum(x), -x))
fn unpack(x : ℝ[3]) -> ℝ[3] =
  let (a, (s, b)) = pair(x)
  a * s + b
)");
  Tensor x = reals({3}, {1, -2, 4});
  expect_reals(p("dflt", {x}), {3}, {2.5, -3.5, 8.5});
  expect_reals(p("expl", {x}), {3}, p("dflt", {x}).reals);
  expect_reals(p("kw", {x}), {3}, {1, -5, 7});
  Value t = p.call("pair", {Value::of(x)});
  ASSERT_EQ(t.kind, Value::Kind::Tuple);
  expect_reals(t.elements[0].tensor, {3}, x.reals);
  expect_reals(t.elements[1].elements[0].tensor, {}, {3});
  expect_reals(t.elements[1].elements[1].tensor, {3}, {-1, 2, -4});
  expect_reals(p("unpack", {x}), {3}, {2, -4, 8});
}

TEST(Interpret, ModulesWithDimensionsAndQuotients) {
  Program p(R"(module Heads{D H : dim} {
  param w : ℝ[D / H, H]  init = ones
  fn apply(x : ℝ[..., D / H]) -> ℝ[..., H] = x · w
}
module M {
  use h : Heads{8, 2}
  fn apply(x : ℝ[4]) -> ℝ[2] = h.apply(x)
}
)");
  ParamMap params = p.params("M");
  ASSERT_EQ(params.at("h.w").shape, (runtime::Shape{4, 2}));
  expect_reals(p.call("M.apply", {tree(params), Value::of(reals({4}, {1, 2, 3, 4}))}).tensor, {2}, {10, 10});
}

TEST(Interpret, SplittingAnAxisIntoHeads) {
  Program p(R"(dim B
module Attn{D H : dim} {
  param w : ℝ[D, model: D]  init = ones
  fn heads(x : ℝ[..., model: D]) -> ℝ[..., heads: H, d: D / H] = split(axis model, x, heads: H, d: D / H)
  fn back(x : ℝ[..., heads: H, d: D / H]) -> ℝ[..., model: D] = merge(axis heads, axis d, x, model: H * (D / H))
  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] = back(heads(x · w))
}
module M {
  use a : Attn{8, 2}
  fn heads(x : ℝ[batch: B, model: 8]) -> ℝ[batch: B, heads: 2, d: 4] = a.heads(x)
  fn round(x : ℝ[batch: B, model: 8]) -> ℝ[batch: B, model: 8] = a.apply(x)
}
fn halves(x : ℝ[batch: B]) -> ℝ[p: B / 2, q: 2] = split(axis batch, x, p: B / 2, q: 2)
)",
            {{"B", 2}});
  ParamMap params = p.params("M");
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i;
  Tensor x = reals({2, 8}, v);
  expect_reals(p.call("M.heads", {tree(params), Value::of(x)}).tensor, {2, 2, 4}, v);
  std::vector<double> sums = {28, 28, 28, 28, 28, 28, 28, 28, 92, 92, 92, 92, 92, 92, 92, 92};
  expect_reals(p.call("M.round", {tree(params), Value::of(x)}).tensor, {2, 8}, sums);
  Program odd(R"(dim B
fn halves(x : ℝ[batch: B]) -> ℝ[p: B / 2, q: 2] = split(axis batch, x, p: B / 2, q: 2)
)",
              {{"B", 3}});
  try {
    odd("halves", {Tensor::real({3})});
    ADD_FAILURE() << "no error";
  } catch (const EvalError& e) {
    EXPECT_EQ(std::string(e.what()), "main.qr:2:51: in halves/%2: the size B / 2 is not a whole number at B = 3");
  }
}

TEST(Interpret, SizesThatAreNotPositiveAtRunTimeAreErrors) {
  const char* text = R"(dim D
fn h(k : key) -> ℝ[] = sum(uniform(k, n: D - 2))
)";
  for (int64_t d : {1, 2}) {
    Program p(text, {{"D", d}});
    try {
      p.call("h", {Value::of_key({1, 2})});
      ADD_FAILURE() << "no error at D = " << d;
    } catch (const EvalError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("main.qr:2:28: in h/%2: the size D - 2 is {} at D = {}: an axis "
                                                   "must have a positive size",
                                                   d - 2, d));
    }
  }
  Program p(text, {{"D", 3}});
  EXPECT_EQ(p.call("h", {Value::of_key({1, 2})}).tensor.reals[0], runtime::uniform_at({1, 2}, 0, 0.0, 1.0));
}

TEST(Interpret, SymbolicSlicesOutOfRangeAreErrors) {
  Program p(R"(dim B
fn s(x : ℝ[batch: B, m: 2]) -> ℝ[batch: 4, m: 2] = slice(axis batch, x, 0, 4)
)",
            {{"B", 2}});
  try {
    p("s", {reals({2, 2}, {1, 2, 3, 4})});
    ADD_FAILURE() << "a slice past the axis was clipped silently";
  } catch (const EvalError& e) {
    EXPECT_EQ(std::string(e.what()),
              "main.qr:2:52: in s/%2: slice [0, 4) of axis `batch` is out of range: the axis has size 2");
  }
  Program q(R"(dim B
fn s(x : ℝ[batch: B, m: 2]) -> ℝ[batch: 2, m: 2] = slice(axis batch, x, 1, 3)
)",
            {{"B", 3}});
  expect_reals(q("s", {reals({3, 2}, {1, 2, 3, 4, 5, 6})}), {2, 2}, {3, 4, 5, 6});
}

TEST(Interpret, ArgumentsAreCheckedAgainstTheDeclaredTypes) {
  Program p("dim B\nfn f(x : ℝ[batch: B, 4], k : key) -> ℝ[batch: B, 4] = x\n", {{"B", 2}});
  auto call = [&](Value x, Value k) { return p.call("f", {x, k}); };
  Value key = Value::of_key({1, 2});
  EXPECT_NO_THROW(call(Value::of(Tensor::real({2, 4})), key));
  try {
    call(Value::of(Tensor::real({3, 4})), key);
    ADD_FAILURE();
  } catch (const EvalError& e) {
    EXPECT_EQ(std::string(e.what()), "argument `x`: expected ℝ[batch: B, 4], found shape [3, 4]");
  }
  EXPECT_THROW(call(Value::of(Tensor::integer(ElemKind::I32, {2, 4})), key), EvalError);
  EXPECT_THROW(call(Value::of(Tensor::real({2, 4})), Value::of(Tensor::real({2, 4}))), EvalError);
  EXPECT_THROW(p.call("f", {Value::of(Tensor::real({2, 4}))}), EvalError);
  // A function that did not elaborate is refused, not run.
  auto bad = elab::testing::elaborate_text("fn f(x : ℝ[3]) -> ℝ[3] = y\n");
  Interpreter interp(*bad->prog, {});
  EXPECT_THROW(interp.call(0, {Value::of(Tensor::real({3}))}), EvalError);
}

TEST(Interpret, AValueThatContradictsItsStaticTypeIsAnInternalError) {
  // Elaboration and evaluation must agree on every site's shape and kind;
  // the interpreter checks it. Break a type by hand to see the check fire.
  Program q("fn f(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2] = sum(axis b, x)\n");
  q.e->prog->functions[0].body[0].type.tensor.axes[0].size = elab::Size::constant(5);
  try {
    q("f", {Tensor::real({2, 3})});
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "internal: f/%2 is ℝ[a: 5] but its value has shape [2]");
  }
  q.e->prog->functions[0].body[0].type.tensor.axes[0].size = elab::Size::constant(2);
  q.e->prog->functions[0].body[0].type.tensor.elem = elab::Elem::I32;
  EXPECT_THROW(q("f", {Tensor::real({2, 3})}), std::logic_error);
}

TEST(Interpret, TwoRunsGiveTheSameBits) {
  Program p(std::string(kStack) + R"(
fn loss(θ : params T, k : key, x : ℝ[b: 2, m: 4]) -> ℝ[] =
  let noise = normal(k, b: 2, m: 4, std = 0.1)
  mean(T.apply(θ, x + noise)^2)
)");
  auto once = [&] {
    ParamMap params = p.params("T", 3);
    return p.call("loss", {tree(params), Value::of_key({5, 6}), Value::of(reals({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}))})
        .tensor.reals.at(0);
  };
  double a = once(), b = once();
  EXPECT_TRUE(testing::same_bits(a, b));
  EXPECT_TRUE(std::isfinite(a));
}

}  // namespace
}  // namespace quire::interp
