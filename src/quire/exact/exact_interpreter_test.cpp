// The exact reference against the f64 reference interpreter: every operation
// of Core on small programs, the result rounded to f64 equal to the f64 one
// (bit for bit for data movement and single correctly rounded operations,
// within a few ulps where the f64 kernels round more than once or call libm),
// the tutorial's loss and gradient, and that the precision really is N bits.

#include "quire/exact/exact_interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/support/testing.h"

namespace quire::exact {
namespace {

using quire::testing::read_text;

using interp::Value;
using interp::testing::ints;
using interp::testing::Program;
using interp::testing::reals;
using runtime::ElemKind;
using runtime::Tensor;

/// How many f64 ulps (of `want`) apart two doubles are; 0 for the same bits or two NaNs.
double ulps_apart(double got, double want) {
  if (std::isnan(got) && std::isnan(want)) return 0;
  if (got == want && std::signbit(got) == std::signbit(want)) return 0;
  if (!std::isfinite(got) || !std::isfinite(want)) return INFINITY;
  const double w = std::fabs(want);
  const double ulp = std::nextafter(w, INFINITY) - w;
  const double d = std::fabs(got - want) / ulp;
  return d == 0 ? 0.5 : d;  // ±0 of the wrong sign: apart, but by less than one ulp
}

/// The f64 interpreter's value and the exact one rounded to f64, leaf by leaf.
struct Both {
  std::vector<std::pair<std::string, Tensor>> f64, exact;
};

Both run_both(const Program& p, const std::string& name, const std::vector<Value>& args, int bits = 128) {
  Both b;
  interp::flatten_value(p.call(name, args), "result", b.f64);
  ExactInterpreter exact(p.prog(), p.dims, bits);
  interp::flatten_value(to_f64(exact.call(p.index(name), args)), "result", b.exact);
  return b;
}

/// Every leaf of `name`'s result within `max_ulps` of the f64 interpreter's (0: the same bits).
void expect_agree(const Program& p, const std::string& name, const std::vector<Value>& args, double max_ulps = 0) {
  Both b = run_both(p, name, args);
  ASSERT_EQ(b.f64.size(), b.exact.size()) << name;
  for (size_t l = 0; l < b.f64.size(); ++l) {
    const Tensor& want = b.f64[l].second;
    const Tensor& got = b.exact[l].second;
    ASSERT_EQ(got.kind, want.kind) << name << " " << b.f64[l].first;
    ASSERT_EQ(got.shape, want.shape) << name << " " << b.f64[l].first;
    if (!want.is_real()) {
      EXPECT_EQ(got.ints, want.ints) << name << " " << b.f64[l].first;
      continue;
    }
    for (size_t i = 0; i < want.reals.size(); ++i)
      EXPECT_LE(ulps_apart(got.reals[i], want.reals[i]), max_ulps)
          << name << " " << b.f64[l].first << "[" << i << "]: exact " << got.reals[i] << ", f64 " << want.reals[i];
  }
}

Value v(Tensor t) { return Value::of(std::move(t)); }

const std::vector<double> kX = {-1.5, -0.0, 0.25, 2.0, 3.5, -4.0};

TEST(ExactBig, ValueSemanticsAndDigits) {
  Big third = div(Big(1.0, 128), Big(3.0, 128));
  Big copy = third;
  Big moved = std::move(copy);
  EXPECT_TRUE(copy.is_zero());  // a moved-from Big is a valid +0
  EXPECT_TRUE(eq(moved, third));
  EXPECT_EQ(Big::digits_for(128), 40);
  // 40 digits tell 128-bit values apart, so they show 1/3's rounding at 128 bits.
  EXPECT_EQ(third.str(40), "3.333333333333333333333333333333333333338e-1");
  EXPECT_EQ(Big(-2.5, 64).str(5), "-2.5000e0");
  EXPECT_EQ(Big(-0.0, 64).str(5), "-0");
  EXPECT_EQ(div(Big(1.0, 64), Big(0.0, 64)).str(5), "inf");
  Big wide(256);
  wide = third;  // assignment takes the source's precision
  EXPECT_EQ(wide.bits(), 128);
  EXPECT_THROW(Big(7), std::invalid_argument);
  EXPECT_EQ(Big::from_decimal("0.1", 128).to_double(), 0.1);
}

TEST(ExactBig, KernelRulesForSpecialValues) {
  const int n = 128;
  const Big nan = div(Big(0.0, n), Big(0.0, n));
  EXPECT_TRUE(max(nan, Big(1.0, n)).is_nan());
  EXPECT_TRUE(min(Big(1.0, n), nan).is_nan());
  EXPECT_FALSE(max(Big(-0.0, n), Big(0.0, n)).sign_bit());
  EXPECT_TRUE(min(Big(0.0, n), Big(-0.0, n)).sign_bit());
  EXPECT_FALSE(relu(Big(-0.0, n)).sign_bit());
  EXPECT_TRUE(relu(nan).is_nan());
  EXPECT_EQ(rsqrt(Big(-0.0, n)).to_double(), -INFINITY);
  EXPECT_FALSE(lt(nan, Big(1.0, n)));
  EXPECT_TRUE(ne(nan, nan));
  // gelu_tanh's constants at N bits: against the f64 formula within its own rounding.
  for (double x : kX) {
    const double f = 0.5 * x * (1.0 + std::tanh(0x1.9884533d43651p-1 * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(gelu_tanh(Big(x, n)).to_double(), f, 1e-15 * std::max(1.0, std::fabs(f))) << x;
  }
}

TEST(ExactInterpret, ElementwiseAgreesWithF64) {
  Program p(R"(fn neg(x : ℝ[6]) -> ℝ[6] = -x
fn abs_(x : ℝ[6]) -> ℝ[6] = abs(x)
fn relu_(x : ℝ[6]) -> ℝ[6] = relu(x)
fn sqrt_(x : ℝ[6]) -> ℝ[6] = sqrt(abs(x))
fn square(x : ℝ[6]) -> ℝ[6] = x^2
fn arith(x : ℝ[6], y : ℝ[6]) -> (ℝ[6], ℝ[6], ℝ[6], ℝ[6], ℝ[6], ℝ[6]) = (x + y, x - y, x * y, x / y, max(x, y), min(x, y))
fn cmp(x : ℝ[6], y : ℝ[6]) -> (bool[6], bool[6], bool[6], bool[6], bool[6], bool[6]) = (x < y, x <= y, x > y, x >= y, x == y, x != y)
fn w(x : ℝ[6], y : ℝ[6]) -> ℝ[6] = where(x > y, x, y * 10.0)
fn n(x : ℝ[6]) -> bool[6] = not(x > 0.0)
fn bc(x : ℝ[2, 3], y : ℝ[3]) -> ℝ[2, 3] = x - y
fn rest(x : ℝ[..., model: 3], g : ℝ[model: 3]) -> ℝ[..., model: 3] = x * g
fn ints(i : i32[3], j : i32[3]) -> (i32[3], ℝ[3], bool[3], i32[3]) = (i + j, i / j, i < j, -i)
fn mixed(x : ℝ[3], i : i32[3]) -> ℝ[3] = x * (i as ℝ)
fn exp_(x : ℝ[6]) -> ℝ[6] = exp(x)
fn log_(x : ℝ[6]) -> ℝ[6] = log(abs(x) + 1.0)
fn rsqrt_(x : ℝ[6]) -> ℝ[6] = rsqrt(abs(x) + 0.5)
fn tanh_(x : ℝ[6]) -> ℝ[6] = tanh(x)
fn erf_(x : ℝ[6]) -> ℝ[6] = erf(x)
fn pow_(x : ℝ[6], y : ℝ[6]) -> ℝ[6] = abs(x) ^ y
fn cube(x : ℝ[6]) -> ℝ[6] = x^3
fn sigmoid_(x : ℝ[6]) -> ℝ[6] = sigmoid(x)
fn silu_(x : ℝ[6]) -> ℝ[6] = silu(x)
fn gelu_(x : ℝ[6]) -> ℝ[6] = gelu(x)
fn gelu_tanh_(x : ℝ[6]) -> ℝ[6] = gelu_tanh(x)
fn log1p_(x : ℝ[6]) -> ℝ[6] = log1p(abs(x) - 0.5)
fn expm1_(x : ℝ[6]) -> ℝ[6] = expm1(x)
fn softplus_(x : ℝ[6]) -> ℝ[6] = softplus(x * 8.0)
)");
  Tensor x = reals({6}, kX), y = reals({6}, {0.5, 3.0, -1.25, 2.0, 0.1, 7.0});
  // One correctly rounded operation in both: the same bits.
  for (const char* f : {"neg", "abs_", "relu_", "sqrt_", "square", "n"}) expect_agree(p, f, {v(x)});
  for (const char* f : {"arith", "cmp", "w"}) expect_agree(p, f, {v(x), v(y)});
  expect_agree(p, "bc", {v(reals({2, 3}, {1, 2, 3, 4, 5, 6})), v(reals({3}, {0.1, 0.2, 0.3}))});
  expect_agree(p, "rest", {v(reals({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})), v(reals({3}, {0.1, 3, -2}))});
  expect_agree(p, "ints", {v(ints(ElemKind::I32, {3}, {1, -7, 9})), v(ints(ElemKind::I32, {3}, {3, 2, 9}))});
  expect_agree(p, "mixed", {v(reals({3}, {0.1, 0.2, 0.3})), v(ints(ElemKind::I32, {3}, {3, -2, 5}))});
  // libm is within an ulp of the correctly rounded value; the exact one rounds once.
  for (const char* f : {"exp_", "log_", "rsqrt_", "tanh_", "erf_", "cube", "log1p_", "expm1_"})
    expect_agree(p, f, {v(x)}, 1);
  // softplus: quire's exp, then log1p (two roundings); x · 8 reaches 28 and -32,
  // beyond the threshold both ways (above 20 both give x exactly).
  expect_agree(p, "softplus_", {v(x)}, 2);
  expect_agree(p, "pow_", {v(x), v(y)}, 1);
  // Compositions round at each step in f64 (and gelu's 1 + erf(x/√2) cancels at x = -4).
  for (const char* f : {"sigmoid_", "silu_"}) expect_agree(p, f, {v(x)}, 4);
  // gelu's 1 + erf(x/√2) and gelu_tanh's 1 + tanh(…) cancel at x = -4: f64 keeps
  // only ~13 digits there (7482 ulps for gelu_tanh), which the exact value shows.
  for (const char* f : {"gelu_", "gelu_tanh_"}) expect_agree(p, f, {v(x)}, 16384);
}

TEST(ExactInterpret, ReductionsAndContractionsAgreeWithF64) {
  Program p(R"(fn s(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = sum(axis m, x)
fn sb(x : ℝ[b: 2, m: 3]) -> ℝ[m: 3] = sum(axis b, x)
fn m(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = mean(axis m, x)
fn mx(x : ℝ[b: 2, m: 3]) -> (ℝ[m: 3], ℝ[b: 2], ℝ[]) = (max(axis b, x), min(axis m, x), max(x))
fn lse(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = logsumexp(axis m, x)
fn all(x : ℝ[b: 2, m: 3]) -> ℝ[] = sum(x) + mean(x) * max(x) - min(x) + logsumexp(axis b, axis m, x)
fn rest(x : ℝ[..., m: 3]) -> ℝ[...] = sum(axis m, x)
fn isum(i : i32[b: 2, m: 3]) -> (i32[b: 2], i32[]) = (sum(axis m, i), max(i))
fn d(x : ℝ[2, 3, 4], w : ℝ[4, 5]) -> ℝ[2, 3, 5] = x · w
fn c(a : ℝ[b: 2, k: 3, i: 2], c : ℝ[b: 2, k: 3, j: 4]) -> ℝ[b: 2, i: 2, j: 4] = contract(axis k, a, c)
fn lead(a : ℝ[..., k: 3], c : ℝ[k: 3, j: 2]) -> ℝ[..., j: 2] = contract(axis k, a, c)
)");
  Tensor x = reals({2, 3}, {0.1, 0.7, 0.3, 1.9, 0.2, 0.6});
  for (const char* f : {"mx", "isum"})
    expect_agree(p, f, {v(f == std::string("isum") ? ints(ElemKind::I32, {2, 3}, {1, 2, 3, 4, 5, 6}) : x)});
  for (const char* f : {"s", "sb", "m", "lse", "all"}) expect_agree(p, f, {v(x)}, 4);
  expect_agree(p, "rest", {v(reals({2, 2, 3}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3}))}, 4);
  auto ramp = [](runtime::Shape s, double scale) {
    Tensor t = Tensor::real(std::move(s));
    for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = scale * static_cast<double>(i + 1);
    return t;
  };
  expect_agree(p, "d", {v(ramp({2, 3, 4}, 0.1)), v(ramp({4, 5}, 0.3))}, 4);
  expect_agree(p, "c", {v(ramp({2, 3, 2}, 0.1)), v(ramp({2, 3, 4}, 0.7))}, 4);
  expect_agree(p, "lead", {v(ramp({2, 2, 3}, 0.1)), v(ramp({3, 2}, 0.3))}, 4);
}

TEST(ExactInterpret, RestructuringIsTheKernelsBitForBit) {
  Program p(R"(fn sp(x : ℝ[a: 6]) -> ℝ[p: 2, q: 3] = split(axis a, x, p: 2, q: 3)
fn me(x : ℝ[p: 2, q: 3]) -> ℝ[r: 6] = merge(axis q, axis p, x, r: 6)
fn me2(x : ℝ[z: 2, p: 2, q: 3]) -> ℝ[z: 2, r: 6] = merge(axis p, axis q, x, r: 6)
fn tr(x : ℝ[a: 2, b: 3]) -> ℝ[b: 3, a: 2] = transpose(x, axis a, axis b)
fn cc(x : ℝ[a: 2, b: 2], y : ℝ[a: 1, b: 2], z : ℝ[a: 2, b: 2]) -> ℝ[a: 5, b: 2] = concat(axis a, x, y, z)
fn cb(x : ℝ[a: 2, b: 2], y : ℝ[a: 2, b: 1]) -> ℝ[a: 2, b: 3] = concat(axis b, x, y)
fn sl(x : ℝ[a: 7]) -> ℝ[a: 3] = slice(axis a, x, 1, 6, 2)
fn g1(t : ℝ[2, v: 4], ids : i32[3]) -> ℝ[2, 3] = gather(axis v, t, ids)
fn gi(t : i32[v: 4], ids : i32[3]) -> i32[3] = gather(axis v, t, ids)
fn oh(ids : i32[3]) -> ℝ[3, v: 4] = one_hot(ids, v: 4)
fn casts(x : ℝ[3]) -> (i32[3], bool[3]) = (x as i32, x as bool)
)");
  auto ramp = [](runtime::Shape s) {
    Tensor t = Tensor::real(std::move(s));
    for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = 0.1 * static_cast<double>(i) - 0.25;
    return t;
  };
  expect_agree(p, "sp", {v(ramp({6}))});
  expect_agree(p, "me", {v(ramp({2, 3}))});
  expect_agree(p, "me2", {v(ramp({2, 2, 3}))});
  expect_agree(p, "tr", {v(ramp({2, 3}))});
  expect_agree(p, "cc", {v(ramp({2, 2})), v(reals({1, 2}, {7, 8})), v(reals({2, 2}, {9, 10, 11, 12}))});
  expect_agree(p, "cb", {v(ramp({2, 2})), v(reals({2, 1}, {7, 8}))});
  expect_agree(p, "sl", {v(ramp({7}))});
  Tensor ids = ints(ElemKind::I32, {3}, {3, 0, 3});
  expect_agree(p, "g1", {v(ramp({2, 4})), v(ids)});
  expect_agree(p, "gi", {v(ints(ElemKind::I32, {4}, {5, 6, 7, 8})), v(ids)});
  expect_agree(p, "oh", {v(ids)});
  expect_agree(p, "casts", {v(reals({3}, {-2.7, 0.0, 3.9}))});
  // Data errors keep the reference interpreter's message and position.
  ExactInterpreter exact(p.prog(), {});
  try {
    exact.call(p.index("g1"), {v(ramp({2, 4})), v(ints(ElemKind::I32, {3}, {0, 4, 1}))});
    FAIL() << "an id out of range was accepted";
  } catch (const interp::EvalError& e) {
    EXPECT_NE(std::string(e.what()).find("main.qr:8:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is outside the table's axis"), std::string::npos) << e.what();
  }
}

TEST(ExactInterpret, DrawsAreTheF64Draws) {
  Program p(R"(fn two(k : key) -> (ℝ[n: 4], ℝ[n: 4], bool[n: 16]) =
  let (k1, k2) = split(k)
  (uniform(k1, n: 4, low = -1.0, high = 3.0), normal(k2, n: 4, mean = 1.0, std = 0.5), bernoulli(k, 0.25, n: 16))
)");
  expect_agree(p, "two", {Value::of_key(runtime::key_from_seed(7))});
}

TEST(ExactInterpret, EveryAdjointOperationAgreesWithF64) {
  // A loss whose reverse sweep holds sum_to, expand (sum and mean),
  // contract_grad_a/b (dot and contract), reshape_as, merge_grad, concat_grad,
  // slice_grad, gather_grad and zeros_like.
  Program p(R"(fn f(x : ℝ[a: 6], w : ℝ[q: 3, j: 2], t : ℝ[v: 4, q: 3], ids : i32[2]) -> ℝ[] =
  let s = split(axis a, x, p: 2, q: 3)
  let m = merge(axis q, axis p, s, r: 6)
  let c = concat(axis r, m, slice(axis r, m, 1, 5, 2))
  let g = gather(axis v, t, ids)
  let h = contract(axis q, s, w) + sum(g · w)
  sum(c * c) + mean(tanh(h)) + sum(mean(axis j, transpose(h, axis p, axis j))) + sum(s + 1.5) + max(x)
fn df(x : ℝ[a: 6], w : ℝ[q: 3, j: 2], t : ℝ[v: 4, q: 3], ids : i32[2]) -> ℝ[a: 6] = grad(f)(x, w, t, ids)
fn dw(x : ℝ[a: 6], w : ℝ[q: 3, j: 2], t : ℝ[v: 4, q: 3], ids : i32[2]) -> ℝ[q: 3, j: 2] = grad(f, wrt = w)(x, w, t, ids)
fn dt(x : ℝ[a: 6], w : ℝ[q: 3, j: 2], t : ℝ[v: 4, q: 3], ids : i32[2]) -> (ℝ[], ℝ[v: 4, q: 3]) = value_and_grad(f, wrt = t)(x, w, t, ids)
)");
  ASSERT_TRUE(p.e->ok());
  std::vector<Value> args = {v(reals({6}, {0.3, -1.2, 0.7, 2.1, -0.4, 0.9})),
                             v(reals({3, 2}, {0.5, -0.25, 1.5, 0.75, -1.0, 0.2})),
                             v(reals({4, 3}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2})),
                             v(ints(ElemKind::I32, {2}, {2, 2}))};
  for (const char* fn : {"df", "dw", "dt"}) expect_agree(p, fn, args, 64);
  std::set<std::string> ops;
  for (const core::Function& fn : p.prog().functions)
    for (const core::Instr& in : fn.body) ops.insert(core::op_info(in.op).spelling);
  for (const char* op : {"sum_to", "expand", "contract_grad_a", "contract_grad_b", "reshape_as", "merge_grad",
                         "concat_grad", "slice_grad", "gather_grad"})
    EXPECT_TRUE(ops.contains(op)) << "the program does not exercise " << op;
}

// pick copies, and its cotangent pick_grad places each element of ct at its
// id: the exact reference gives the f64 bits, forward and reverse, also
// under a `...` and along a middle axis.
TEST(ExactInterpret, PickAndItsAdjointAgreeWithF64) {
  Program p(R"(fn pk(x : ℝ[2, v: 4, 3], ids : i32[2, 3]) -> ℝ[2, 3] = pick(axis v, x, ids)
fn pr{N}(x : ℝ[..., n: N], ids : i32[...]) -> ℝ[...] = pick(axis n, x, ids)
fn ce(x : ℝ[b: 2, t: 3, v: 5], ids : i32[b: 2, t: 3]) -> ℝ[] = cross_entropy(x, ids) + sum(pr(x, ids) * pr(x, ids))
fn dce(x : ℝ[b: 2, t: 3, v: 5], ids : i32[b: 2, t: 3]) -> ℝ[b: 2, t: 3, v: 5] = grad(ce)(x, ids)
)");
  ASSERT_TRUE(p.e->ok()) << p.e->rendered();
  Tensor x = Tensor::real({2, 4, 3});
  for (size_t i = 0; i < x.reals.size(); ++i) x.reals[i] = 0.3 * static_cast<double>(i) - 1.7;
  expect_agree(p, "pk", {v(x), v(ints(ElemKind::I32, {2, 3}, {3, 0, 1, 2, 2, 0}))});
  Tensor logits = Tensor::real({2, 3, 5});
  for (size_t i = 0; i < logits.reals.size(); ++i) logits.reals[i] = 0.37 * static_cast<double>(i % 7) - 0.9;
  const Tensor ids = ints(ElemKind::I32, {2, 3}, {4, 0, 2, 2, 1, 3});
  expect_agree(p, "ce", {v(logits), v(ids)}, 64);
  expect_agree(p, "dce", {v(logits), v(ids)}, 64);
  std::set<std::string> ops;
  for (const core::Function& fn : p.prog().functions)
    for (const core::Instr& in : fn.body) ops.insert(core::op_info(in.op).spelling);
  EXPECT_TRUE(ops.contains("pick_grad")) << "the program does not exercise pick_grad";
}

TEST(ExactInterpret, PrecisionIsNBits) {
  Program p(R"(fn s(x : ℝ[3]) -> ℝ[] = sum(x)
fn tiny(x : ℝ[], y : ℝ[]) -> ℝ[] = (x + y) - x
)");
  Tensor big = reals({3}, {1e20, 1.0, -1e20});
  EXPECT_EQ(p("s", {big}).reals[0], 0.0);  // f64 loses the 1
  ExactInterpreter exact(p.prog(), {});
  ExactValue r = exact.call(p.index("s"), {v(big)});
  EXPECT_EQ(r.real.elems.at(0).to_double(), 1.0);
  const double eps = std::ldexp(1.0, -80);
  EXPECT_EQ(p("tiny", {reals({}, {1.0}), reals({}, {eps})}).reals[0], 0.0);
  EXPECT_EQ(to_f64(exact.call(p.index("tiny"), {v(reals({}, {1.0})), v(reals({}, {eps}))})).tensor.reals[0], eps);
  // At 64 bits 2^-80 is lost again.
  ExactInterpreter narrow(p.prog(), {}, 64);
  EXPECT_EQ(to_f64(narrow.call(p.index("tiny"), {v(reals({}, {1.0})), v(reals({}, {eps}))})).tensor.reals[0], 0.0);
}

TEST(ExactInterpret, AgreementIsMeasuredNotAssumed) {
  // Ten positive terms, no cancellation: f64 rounds ten times to 0.9999999999999999,
  // the exact sum of the ten doubles 0.1 is 1.0000000000000000555… and rounds to 1.
  Program p("fn s(x : ℝ[10]) -> ℝ[] = sum(x)\n");
  Tensor x = reals({10}, std::vector<double>(10, 0.1));
  const double f64 = p("s", {x}).reals[0];
  ExactInterpreter exact(p.prog(), {});
  ExactValue r = exact.call(p.index("s"), {v(x)});
  EXPECT_EQ(f64, std::nextafter(1.0, 0.0));
  EXPECT_EQ(r.real.elems.at(0).to_double(), 1.0);
  EXPECT_EQ(r.real.elems.at(0).str(20), "1.0000000000000000555e0");
}

// ---------------------------------------------------------------------------
// The tutorial: 07_train.qr's loss and its gradient, with the parameters and
// the batch `quire run` would give it.

struct Tutorial {
  std::unique_ptr<elab::testing::Elaborated> e;
  std::map<std::string, int64_t> dims{{"B", 4}};

  Tutorial() {
    const std::filesystem::path dir = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial";
    std::map<std::string, std::string> files;
    for (const char* name : {"01_linear.qr", "02_norm.qr", "03_block.qr", "04_loss.qr", "05_dropout.qr", "06_tower.qr"})
      files[name] = read_text(dir / name);
    files["main.qr"] = read_text(dir / "07_train.qr") +
                       "\nfn g(θ : params t.Tower, batch : (ℝ[batch: B, model: 4], ℝ[batch: B, model: 4])) -> params "
                       "t.Tower = grad(loss)(θ, batch)\n";
    e = elab::testing::elaborate_files(files);
  }
  std::vector<Value> arguments(int entry) const {
    const core::Function& fn = e->prog->functions.at(entry);
    interp::ParamMap params = interp::init_params(*e->prog, fn.args[0].type.params, 0, dims);
    return interp::entry_arguments(*e->prog, entry, &params, dims, 0, std::nullopt);
  }
};

/// max |exact − f64| / max |f64| over a leaf's elements.
double relative_difference(const Tensor& exact, const Tensor& f64) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < f64.reals.size(); ++i) {
    diff = std::max(diff, std::fabs(exact.reals[i] - f64.reals[i]));
    scale = std::max(scale, std::fabs(f64.reals[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

TEST(ExactTutorial, LossAgreesWithF64) {
  Tutorial t;
  ASSERT_TRUE(t.e->ok()) << t.e->rendered();
  const int entry = t.e->prog->find_function("loss");
  std::vector<Value> args = t.arguments(entry);
  interp::Interpreter f64(*t.e->prog, t.dims);
  const double want = f64.call(entry, args).tensor.reals.at(0);
  ExactInterpreter exact(*t.e->prog, t.dims);
  const ExactValue got = exact.call(entry, args);
  const double rel = std::fabs(got.real.elems.at(0).to_double() - want) / std::fabs(want);
  EXPECT_LT(rel, 1e-12) << "exact " << got.real.elems.at(0).str(40) << ", f64 " << want;
  std::cout << "[ exact    ] tutorial loss: exact " << got.real.elems.at(0).str(40) << ", f64 " << want
            << ", relative difference " << rel << "\n";
}

TEST(ExactTutorial, GradientAgreesWithF64PerParameter) {
  Tutorial t;
  ASSERT_TRUE(t.e->ok()) << t.e->rendered();
  const int entry = t.e->prog->find_function("g");
  std::vector<Value> args = t.arguments(entry);
  interp::Interpreter f64(*t.e->prog, t.dims);
  const Value want = f64.call(entry, args);
  ExactInterpreter exact(*t.e->prog, t.dims);
  const Value got = to_f64(exact.call(entry, args));
  ASSERT_EQ(got.kind, Value::Kind::Params);
  ASSERT_EQ(got.params->size(), want.params->size());
  for (const auto& [path, w] : *want.params) {
    const Tensor& g = got.params->at(path);
    ASSERT_EQ(g.shape, w.shape) << path;
    const double rel = relative_difference(g, w);
    EXPECT_LT(rel, 1e-12) << path;
    std::cout << "[ exact    ] tutorial gradient " << path << ": relative difference " << rel << "\n";
  }
}

}  // namespace
}  // namespace quire::exact
