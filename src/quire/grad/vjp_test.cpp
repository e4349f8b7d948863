// The reverse sweep against central finite differences in f64: for each
// program, the vjp's cotangent of every argument element is compared with
// (L(x + h e) − L(x − h e)) / 2h of L = Σ ct · f(x), random x and ct.

#include "quire/grad/vjp.h"

#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "quire/interp/interp_testing.h"

namespace quire::grad {
namespace {

using interp::Value;
using interp::testing::Program;

runtime::Tensor random_like(const runtime::Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  runtime::Tensor t = runtime::Tensor::real(shape);
  std::uniform_real_distribution<double> d(lo, hi);
  for (double& v : t.reals) v = d(rng);
  return t;
}

double dot_all(const runtime::Tensor& a, const runtime::Tensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.reals.size(); ++i) s += a.reals[i] * b.reals[i];
  return s;
}

/// Checks every real tensor argument of `fn` (called with `args`) against finite differences.
void check_gradients(const std::string& text, const std::string& fn, std::vector<Value> args, double lo = -2,
                     double hi = 2, double tolerance = 1e-6) {
  Program p(text);
  ASSERT_TRUE(p.e->ok());
  elab::Program& prog = *p.e->prog;
  int f = p.index(fn);
  std::vector<int> wrt = differentiable_args(prog.functions[f]);
  int v = vjp(prog, f, wrt);
  std::mt19937_64 rng(42);
  interp::Interpreter interp(prog, {});
  Value y = interp.call(f, args);
  ASSERT_EQ(y.kind, Value::Kind::Tensor);
  runtime::Tensor ct = random_like(y.tensor.shape, rng, -1, 1);
  std::vector<Value> vargs = args;
  vargs.push_back(Value::of(ct));
  Value r = interp.call(v, vargs);
  ASSERT_EQ(r.kind, Value::Kind::Tuple);
  for (size_t k = 0; k < y.tensor.reals.size(); ++k) EXPECT_EQ(r.elements[0].tensor.reals[k], y.tensor.reals[k]);
  for (size_t w = 0; w < wrt.size(); ++w) {
    const Value& grad = r.elements[1 + w];
    if (grad.kind != Value::Kind::Tensor) continue;
    Value& a = args[wrt[w]];
    for (size_t i = 0; i < a.tensor.reals.size(); ++i) {
      const double x0 = a.tensor.reals[i];
      const double h = 1e-6 * std::max(1.0, std::fabs(x0));
      a.tensor.reals[i] = x0 + h;
      double up = dot_all(ct, interp.call(f, args).tensor);
      a.tensor.reals[i] = x0 - h;
      double down = dot_all(ct, interp.call(f, args).tensor);
      a.tensor.reals[i] = x0;
      double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad.tensor.reals[i], fd, tolerance * std::max(1.0, std::fabs(fd)))
          << fn << ": argument " << wrt[w] << " element " << i;
    }
  }
  (void)lo;
  (void)hi;
}

std::vector<Value> random_args(std::vector<runtime::Shape> shapes, uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::vector<Value> out;
  for (const runtime::Shape& s : shapes) out.push_back(Value::of(random_like(s, rng, lo, hi)));
  return out;
}

TEST(Vjp, ElementwiseUnary) {
  const char* text = R"(fn f(x : ℝ[a: 3, b: 4]) -> ℝ[a: 3, b: 4] =
  -x + exp(x) * tanh(x) + erf(x) - sigmoid(x) + relu(x) + abs(x) + gelu(x) + gelu_tanh(x) + silu(x)
fn g(x : ℝ[a: 3, b: 4]) -> ℝ[a: 3, b: 4] = log(x) + sqrt(x) + rsqrt(x) + x^3 + x^2 + x^x
)";
  check_gradients(text, "f", random_args({{3, 4}}, 1));
  check_gradients(text, "g", random_args({{3, 4}}, 2, 0.5, 2.0));
}

// d log1p = 1/(1 + x), d expm1 = exp(x), d softplus = sigmoid(x); softplus on
// both sides of its threshold (20), where the forward becomes x.
TEST(Vjp, Log1pExpm1Softplus) {
  const char* text = R"(fn f(x : ℝ[a: 3, b: 4]) -> ℝ[a: 3, b: 4] = log1p(x) + expm1(x) * softplus(x)
fn g(x : ℝ[a: 3, b: 4]) -> ℝ[a: 3, b: 4] = softplus(x)
)";
  check_gradients(text, "f", random_args({{3, 4}}, 11, -0.9, 2.0));
  check_gradients(text, "g", random_args({{3, 4}}, 12, -30.0, 30.0));
}

TEST(Vjp, BroadcastingBinaryAndWhere) {
  const char* text = R"(fn f(x : ℝ[a: 3, b: 4], y : ℝ[b: 4], s : ℝ[]) -> ℝ[a: 3, b: 4] =
  let m = max(x, y) - min(x * s, y)
  (x + y) * (x - s) / (y * y + 1.0) + where(x > y, x * s, y) + m
)";
  check_gradients(text, "f", random_args({{3, 4}, {4}, {}}, 3));
}

TEST(Vjp, Reductions) {
  const char* text = R"(fn f(x : ℝ[a: 3, b: 4]) -> ℝ[b: 4] =
  sum(axis a, x * x) + mean(axis a, x) * max(axis a, x) - min(axis a, exp(x)) + logsumexp(axis a, x)
fn g(x : ℝ[a: 3, b: 4]) -> ℝ[] = mean(x) + sum(x * x) + max(x) + logsumexp(axis a, axis b, x)
)";
  check_gradients(text, "f", random_args({{3, 4}}, 4));
  check_gradients(text, "g", random_args({{3, 4}}, 5));
}

TEST(Vjp, ProductsAndRestructuring) {
  const char* text2 = R"(fn f(x : ℝ[a: 2, k: 3], w : ℝ[k: 3, o: 4], z : ℝ[a: 2, k: 3]) -> ℝ[a: 2, o: 4] =
  let h = x · w
  let c = contract(axis k, x, z)
  h * c
fn g(x : ℝ[a: 2, k: 6]) -> ℝ[a: 2, p: 2, q: 3] =
  let s = split(axis k, x, p: 2, q: 3)
  let m = merge(axis a, axis p, s, m: 4)
  let back = split(axis m, m, a: 2, p: 2)
  let t = concat(axis q, slice(axis q, back, 0, 2), slice(axis q, back, 2, 3))
  t * t
)";
  check_gradients(text2, "f", random_args({{2, 3}, {3, 4}, {2, 3}}, 6));
  check_gradients(text2, "g", random_args({{2, 6}}, 7));
}

// The mean's gradient gives each element ct / count of its row, exactly:
// a division by 3, and by 4 as the product with 1/4 (interpreter.cpp's Expand).
TEST(Vjp, MeanSharesItsCotangentByTheCount) {
  Program p(R"(fn m3(x : ℝ[b: 2, m: 3]) -> ℝ[b: 2] = mean(axis m, x)
fn m4(x : ℝ[b: 2, m: 4]) -> ℝ[b: 2] = mean(axis m, x)
)");
  elab::Program& prog = *p.e->prog;
  for (int count : {3, 4}) {
    const int v = vjp(prog, p.index(fmt::format("m{}", count)), {0});
    interp::Interpreter interp(prog, {});
    std::mt19937_64 rng(static_cast<uint64_t>(count));
    runtime::Tensor x = random_like({2, count}, rng, -1, 1);
    runtime::Tensor ct = random_like({2}, rng, -1, 1);
    ct.reals[1] = 0x1.5555555555555p-2;  // one third: its third rounds
    Value r = interp.call(v, {Value::of(x), Value::of(ct)});
    const runtime::Tensor& g = r.elements[1].tensor;
    ASSERT_EQ(g.shape, (runtime::Shape{2, count}));
    for (int b = 0; b < 2; ++b)
      for (int j = 0; j < count; ++j)
        EXPECT_EQ(g.reals[static_cast<size_t>(b * count + j)], ct.reals[static_cast<size_t>(b)] / count)
            << b << ", " << j;
  }
}

TEST(Vjp, GatherScattersAdding) {
  Program p(R"(fn f(table : ℝ[v: 5, d: 3], ids : i32[n: 4]) -> ℝ[n: 4, d: 3] = gather(table, ids) * 2.0)");
  elab::Program& prog = *p.e->prog;
  int f = p.index("f");
  int v = vjp(prog, f, {0});
  interp::Interpreter interp(prog, {});
  std::mt19937_64 rng(8);
  runtime::Tensor table = random_like({5, 3}, rng, -1, 1);
  runtime::Tensor ids = interp::testing::ints(runtime::ElemKind::I32, {4}, {1, 3, 1, 0});
  runtime::Tensor ct = random_like({4, 3}, rng, -1, 1);
  Value r = interp.call(v, {Value::of(table), Value::of(ids), Value::of(ct)});
  const runtime::Tensor& g = r.elements[1].tensor;
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(g.reals[0 * 3 + d], 2.0 * ct.reals[3 * 3 + d]);
    EXPECT_EQ(g.reals[1 * 3 + d], 2.0 * ct.reals[0 * 3 + d] + 2.0 * ct.reals[2 * 3 + d]);
    EXPECT_EQ(g.reals[2 * 3 + d], 0.0);
    EXPECT_EQ(g.reals[3 * 3 + d], 2.0 * ct.reals[1 * 3 + d]);
  }
}

TEST(Vjp, PickPutsEachCotangentAtItsTargetAlone) {
  // Along the middle of three axes, under a `...`; the finite differences
  // check the rule, the bits below say nothing else is added.
  const char* text = R"(fn f(x : ℝ[b: 2, v: 4, d: 3], ids : i32[b: 2, d: 3]) -> ℝ[b: 2, d: 3] = pick(axis v, x, ids) * 2.0
fn g(x : ℝ[..., v: 4], ids : i32[...]) -> ℝ[...] = pick(axis v, x, ids)
fn h(x : ℝ[b: 2, v: 4], ids : i32[b: 2]) -> ℝ[b: 2] = g(x, ids)
)";
  std::mt19937_64 rng(9);
  const runtime::Tensor ids = interp::testing::ints(runtime::ElemKind::I32, {2, 3}, {3, 0, 3, 1, 1, 2});
  check_gradients(text, "f", {Value::of(random_like({2, 4, 3}, rng, -1, 1)), Value::of(ids)});
  check_gradients(text, "h",
                  {Value::of(random_like({2, 4}, rng, -1, 1)), Value::of(interp::testing::ints(runtime::ElemKind::I32, {2}, {2, 0}))});
  Program p(text);
  elab::Program& prog = *p.e->prog;
  int v = vjp(prog, p.index("f"), {0});
  interp::Interpreter interp(prog, {});
  runtime::Tensor ct = random_like({2, 3}, rng, -1, 1);
  Value r = interp.call(v, {Value::of(random_like({2, 4, 3}, rng, -1, 1)), Value::of(ids), Value::of(ct)});
  const runtime::Tensor& d = r.elements[1].tensor;
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 3; ++e) {
        const size_t at = static_cast<size_t>((b * 4 + j) * 3 + e);
        const bool target = ids.ints[static_cast<size_t>(b * 3 + e)] == j;
        EXPECT_EQ(d.reals[at], target ? 2.0 * ct.reals[static_cast<size_t>(b * 3 + e)] : 0.0) << b << j << e;
      }
}

TEST(Vjp, ScanGradientsMatchFiniteDifferences) {
  // The recurrence's cotangents are the adjoint recurrence (for x) and λ
  // times the neighbouring state (for a), with a's first step unread; a
  // `...`, axes out of order, and the prelude's matrix_scan and linear_scan.
  const char* text =
      R"(fn f(a : ℝ[m: 3, t: 5, n: 3], x : ℝ[t: 5, n: 3]) -> ℝ[t: 5, n: 3] = scan(axis t, axis n, axis m, a, x) * 2.0
fn g(a : ℝ[..., t: 4, n: 2, m: 2], x : ℝ[..., t: 4, n: 2]) -> ℝ[..., t: 4, n: 2] = matrix_scan(a, x)
fn h(a : ℝ[b: 2, t: 4, n: 2, m: 2], x : ℝ[b: 2, t: 4, n: 2]) -> ℝ[b: 2, t: 4, n: 2] = g(a, x)
fn l(a : ℝ[b: 2, time: 6, c: 3], x : ℝ[b: 2, time: 6, c: 3]) -> ℝ[b: 2, time: 6, c: 3] = linear_scan(a, x)
)";
  std::mt19937_64 rng(10);
  check_gradients(text, "f",
                  {Value::of(random_like({3, 5, 3}, rng, -0.6, 0.6)), Value::of(random_like({5, 3}, rng, -1, 1))});
  check_gradients(
      text, "h", {Value::of(random_like({2, 4, 2, 2}, rng, -0.8, 0.8)), Value::of(random_like({2, 4, 2}, rng, -1, 1))});
  check_gradients(text, "l",
                  {Value::of(random_like({2, 6, 3}, rng, -1, 1)), Value::of(random_like({2, 6, 3}, rng, -1, 1))});
  // a's first step gets exactly +0.0: the state before it is absent.
  Program p(text);
  elab::Program& prog = *p.e->prog;
  int v = vjp(prog, p.index("f"), {0});
  interp::Interpreter interp(prog, {});
  Value r = interp.call(v, {Value::of(random_like({3, 5, 3}, rng, -1, 1)), Value::of(random_like({5, 3}, rng, -1, 1)),
                            Value::of(random_like({5, 3}, rng, -1, 1))});
  const runtime::Tensor& d = r.elements[1].tensor;
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 3; ++n) EXPECT_EQ(std::bit_cast<uint64_t>(d.reals[static_cast<size_t>(m * 15 + n)]), 0u);
}

// Parameters, calls into modules and a stacked fold: the tutorial's tower.
TEST(Vjp, ParameterTreesCallsAndFolds) {
  Program p(R"(module Lin {
  param w : ℝ[3, 3]  init = xavier_uniform
  param b : ℝ[3]     init = zeros
  fn apply(x : ℝ[..., 3]) -> ℝ[..., 3] = x · w + b
}
module Block {
  use lin : Lin
  param γ : ℝ[3]  init = ones
  fn apply(x : ℝ[..., 3]) -> ℝ[..., 3] = x + tanh(lin.apply(x)) * γ
}
module Tower {
  use blocks : stack{3}(Block)
  fn apply(x : ℝ[..., 3]) -> ℝ[..., 3] = blocks.apply(x)
}
fn loss(θ : params Tower, x : ℝ[b: 2, 3]) -> ℝ[] = mean(Tower.apply(θ, x)^2)
)");
  ASSERT_TRUE(p.e->ok());
  elab::Program& prog = *p.e->prog;
  int f = p.index("loss");
  int v = vjp(prog, f, {0, 1});
  interp::ParamMap theta = p.params("Tower", 3);
  std::mt19937_64 rng(9);
  for (auto& [path, t] : theta)
    for (double& x : t.reals) x += std::uniform_real_distribution<double>(-0.5, 0.5)(rng);
  runtime::Tensor x = random_like({2, 3}, rng, -1, 1);
  interp::Interpreter interp(prog, {});
  auto loss = [&](const interp::ParamMap& th, const runtime::Tensor& xx) {
    return interp.call(f, {interp::testing::tree(th), Value::of(xx)}).tensor.reals[0];
  };
  Value r = interp.call(v, {interp::testing::tree(theta), Value::of(x), Value::of(runtime::Tensor::scalar(1.0))});
  const interp::ParamMap& g = *r.elements[1].params;
  ASSERT_EQ(g.size(), theta.size());
  for (auto& [path, t] : theta) {
    for (size_t i = 0; i < t.reals.size(); ++i) {
      const double x0 = t.reals[i], h = 1e-6;
      t.reals[i] = x0 + h;
      double up = loss(theta, x);
      t.reals[i] = x0 - h;
      double down = loss(theta, x);
      t.reals[i] = x0;
      EXPECT_NEAR(g.at(path).reals[i], (up - down) / (2 * h), 1e-7) << path << "[" << i << "]";
    }
  }
  for (size_t i = 0; i < x.reals.size(); ++i) {
    const double x0 = x.reals[i], h = 1e-6;
    x.reals[i] = x0 + h;
    double up = loss(theta, x);
    x.reals[i] = x0 - h;
    double down = loss(theta, x);
    x.reals[i] = x0;
    EXPECT_NEAR(r.elements[2].tensor.reals[i], (up - down) / (2 * h), 1e-7) << "x[" << i << "]";
  }
}

// A gradient tree's leaf is the sum of its parts: a leaf with one part is
// that part, its elements shared and every bit kept (-0.0 too), whatever
// its numbers; a leaf with no part is +0.0.
TEST(Vjp, GradientLeavesAreTheirPartsOrZero) {
  Program p(R"(module M {
  param a : ℝ[n: 2]  init = zeros
  param b : ℝ[n: 2]  init = zeros
  param c : ℝ[n: 2]  init = zeros
  fn apply(x : ℝ[n: 2], y : ℝ[n: 2]) -> ℝ[] = sum(a * x) + sum(b * y)
}
fn loss(θ : params M, x : ℝ[n: 2], y : ℝ[n: 2]) -> ℝ[] = M.apply(θ, x, y)
)");
  ASSERT_TRUE(p.e->ok()) << p.e->rendered();
  elab::Program& prog = *p.e->prog;
  const int v = vjp(prog, p.index("loss"), {0});
  interp::Interpreter interp(prog, {});
  const runtime::Tensor x = interp::testing::reals({2}, {-0.0, 3.0}), y = interp::testing::reals({2}, {0.5, -2.0});
  Value r = interp.call(
      v, {interp::testing::tree(p.params("M")), Value::of(x), Value::of(y), Value::of(runtime::Tensor::scalar(1.0))});
  const interp::ParamMap& g = *r.elements[1].params;
  // ∂/∂a = x, its -0.0 kept.
  EXPECT_TRUE(std::signbit(g.at("a").reals[0]));
  EXPECT_EQ(g.at("a").reals[0], 0.0);
  EXPECT_EQ(g.at("a").reals[1], 3.0);
  // ∂/∂b = y, bit for bit; c has no part.
  EXPECT_EQ(g.at("b").reals[0], 0.5);
  EXPECT_EQ(g.at("b").reals[1], -2.0);
  EXPECT_EQ(g.at("c").reals[0], 0.0);
  EXPECT_FALSE(std::signbit(g.at("c").reals[1]));
}

// The language's forms call the same vjp: grad(f) is its cotangent of the
// chosen argument at ct = 1, value_and_grad(f) adds f's value.
TEST(Vjp, GradAndValueAndGradInTheLanguage) {
  Program p(R"(fn loss(x : ℝ[n: 4], y : ℝ[n: 4]) -> ℝ[] = sum(exp(x) * y)
fn dx(x : ℝ[n: 4], y : ℝ[n: 4]) -> ℝ[n: 4] = grad(loss)(x, y)
fn dy(x : ℝ[n: 4], y : ℝ[n: 4]) -> ℝ[n: 4] = grad(loss, wrt = y)(x, y)
fn both(x : ℝ[n: 4], y : ℝ[n: 4]) -> (ℝ[], ℝ[n: 4]) = value_and_grad(loss)(x, y)
)");
  ASSERT_TRUE(p.e->ok()) << p.e->rendered();
  auto args = random_args({{4}, {4}}, 10);
  runtime::Tensor gx = p("dx", {args[0].tensor, args[1].tensor});
  runtime::Tensor gy = p("dy", {args[0].tensor, args[1].tensor});
  Value both = p.call("both", args);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(gx.reals[i], 1.0 * args[1].tensor.reals[i] * std::exp(args[0].tensor.reals[i]));
    EXPECT_EQ(gy.reals[i], 1.0 * std::exp(args[0].tensor.reals[i]));
    EXPECT_EQ(both.elements[1].tensor.reals[i], gx.reals[i]);
  }
  EXPECT_EQ(both.elements[0].tensor.reals[0], p("loss", {args[0].tensor, args[1].tensor}).reals[0]);
}

}  // namespace
}  // namespace quire::grad
