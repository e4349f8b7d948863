// The prelude's Newton–Schulz iteration (prelude/optim.qr): its lines are the
// bf16 iteration they state (the interpreter under the f32 policy against
// plain loops written here, bit for bit, on every shape: rows < cols,
// rows > cols through newton_schulz_tall, square, one row, stacked copies),
// it runs in bf16 under the f64 policy too, and it orthogonalizes: the
// singular values of its result lie in the quintic's band.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "quire/interp/interp_testing.h"
#include "quire/realize/realization.h"
#include "quire/runtime/float_types.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::prelude {
namespace {

using interp::Value;
using interp::testing::expect_reals;
using interp::testing::reals;
using runtime::FloatType;
using runtime::Tensor;

// PyTorch's Muon's coefficients and eps, the functions' defaults.
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315, kEps = 1e-7;

const char* kCalls = R"(fn wide_3x5(g : ℝ[r: 3, c: 5]) -> ℝ[r: 3, c: 5] = newton_schulz(g)
fn wide_1x6(g : ℝ[r: 1, c: 6]) -> ℝ[r: 1, c: 6] = newton_schulz(g)
fn square_4x4(g : ℝ[r: 4, c: 4]) -> ℝ[r: 4, c: 4] = newton_schulz(g)
fn tall_5x3(g : ℝ[r: 5, c: 3]) -> ℝ[r: 5, c: 3] = newton_schulz_tall(g)
fn stacked_2x3x5(g : ℝ[l: 2, r: 3, c: 5]) -> ℝ[l: 2, r: 3, c: 5] = newton_schulz(g)
fn wide_8x32(g : ℝ[r: 8, c: 32]) -> ℝ[r: 8, c: 32] = newton_schulz(g)
fn tall_32x8(g : ℝ[r: 32, c: 8]) -> ℝ[r: 32, c: 8] = newton_schulz_tall(g)
fn square_16x16(g : ℝ[r: 16, c: 16]) -> ℝ[r: 16, c: 16] = newton_schulz(g)
fn stacked_3x8x12(g : ℝ[l: 3, r: 8, c: 12]) -> ℝ[l: 3, r: 8, c: 12] = newton_schulz(g)
fn coefficients(g : ℝ[r: 3, c: 5]) -> ℝ[r: 3, c: 5] = newton_schulz(g, 2.0, -1.5, 0.5, 1e-3)
)";

/// `fn` of kCalls on g under `policy`: the realized interpreter, as a training run evaluates it.
Tensor call_under(const interp::testing::Program& p, const std::string& fn, const Tensor& g, precision::Policy policy) {
  precision::RealizeOptions options;
  options.policy = policy;
  precision::Realization r = precision::realize(p.prog(), p.index(fn), options, p.dims);
  interp::Interpreter interp(p.prog(), p.dims, &r);
  return interp.call(p.index(fn), {Value::of(g)}).tensor;
}

/// Gaussian elements, rounded to f32 (the f32 policy's input type), times `scale`.
Tensor gaussian(runtime::Shape shape, uint64_t seed, double scale = 0.01) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Tensor t = Tensor::real(std::move(shape));
  for (double& v : t.reals) v = runtime::round_to(FloatType::F32, scale * normal(rng));
  return t;
}

// ---------------------------------------------------------------- the iteration, as plain loops

double bf16(double x) { return runtime::round_to(FloatType::BF16, x); }
double f32(double x) { return runtime::round_to(FloatType::F32, x); }
/// A half value computed from half operands: in f32, rounded once on store
/// (through f32, docs/numerics.md "Evaluation at the realized types").
double half(double x) { return bf16(f32(x)); }

/// newton_schulz of one R × C matrix (row-major) under the f32 policy, as
/// optim.qr's lines say: every product of bf16 operands accumulated in f32
/// in increasing index order, the region's values stored in bf16, each
/// island's combination in f32 with f32 constants, then cast to bf16.
std::vector<double> newton_schulz_loops(const std::vector<double>& g, int R, int C, double a = kA, double b = kB,
                                        double c = kC, double eps = kEps) {
  std::vector<double> x(g.size());
  for (size_t i = 0; i < g.size(); ++i) x[i] = bf16(g[i]);
  double squares = 0.0;
  for (double v : x) squares = f32(squares + f32(v * v));
  const double norm = half(std::max(bf16(f32(std::sqrt(squares))), f32(eps)));
  for (double& v : x) v = half(v / norm);
  for (int step = 0; step < 5; ++step) {
    std::vector<double> gram(R * R), poly(R * R), next(R * C);
    for (int r = 0; r < R; ++r)
      for (int s = 0; s < R; ++s) {
        double acc = 0.0;
        for (int j = 0; j < C; ++j) acc = f32(acc + f32(x[r * C + j] * x[s * C + j]));
        gram[r * R + s] = half(acc);
      }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < R; ++t) {
        double acc = 0.0;
        for (int s = 0; s < R; ++s) acc = f32(acc + f32(gram[r * R + s] * gram[s * R + t]));
        poly[r * R + t] = bf16(f32(f32(f32(b) * gram[r * R + t]) + f32(f32(c) * acc)));
      }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < C; ++j) {
        double acc = 0.0;
        for (int k = 0; k < R; ++k) acc = f32(acc + f32(poly[r * R + k] * x[k * C + j]));
        next[r * C + j] = bf16(f32(f32(f32(a) * x[r * C + j]) + acc));
      }
    x = next;
  }
  return x;
}

/// newton_schulz_tall's: the loops on the transpose, transposed back.
std::vector<double> newton_schulz_tall_loops(const std::vector<double>& g, int R, int C) {
  std::vector<double> t(g.size());
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) t[c * R + r] = g[r * C + c];
  const std::vector<double> o = newton_schulz_loops(t, C, R);
  std::vector<double> back(g.size());
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) back[r * C + c] = o[c * R + r];
  return back;
}

TEST(PreludeNewtonSchulz, ElaboratesInOptimQr) {
  auto e = elab::testing::elaborate_text("");
  ASSERT_TRUE(e->ok()) << e->rendered();
  for (const char* name : {"newton_schulz", "newton_schulz_tall", "newton_schulz_step"}) {
    int f = e->prog->find_function(name);
    ASSERT_GE(f, 0) << name;
    EXPECT_TRUE(e->prog->in_prelude(f)) << name;
    EXPECT_EQ(e->prog->sources.file(e->prog->functions[f].file).path, "prelude/optim.qr") << name;
    EXPECT_EQ(e->fn(name).dims, (std::vector<std::string>{"R", "C"})) << name;
    EXPECT_EQ(e->type(e->fn(name).args[0].type), "ℝ[..., i: R, j: C]") << name;
  }
  const core::Function& ns = e->fn("newton_schulz");
  const double defaults[] = {kA, kB, kC, kEps};
  for (int k = 0; k < 4; ++k) {
    EXPECT_TRUE(ns.args[k + 1].has_default);
    EXPECT_EQ(ns.args[k + 1].default_value, defaults[k]);
  }
}

TEST(PreludeNewtonSchulz, IsTheBf16IterationItsLinesStateOnEveryShape) {
  interp::testing::Program p(kCalls);
  struct Case {
    const char* fn;
    int R, C;
    bool tall;
  };
  for (const Case& k : {Case{"wide_3x5", 3, 5, false}, Case{"wide_1x6", 1, 6, false}, Case{"square_4x4", 4, 4, false},
                        Case{"tall_5x3", 5, 3, true}}) {
    SCOPED_TRACE(k.fn);
    const Tensor g = gaussian({k.R, k.C}, 7);
    const std::vector<double> want = k.tall ? newton_schulz_tall_loops(g.reals.to_vector(), k.R, k.C)
                                            : newton_schulz_loops(g.reals.to_vector(), k.R, k.C);
    expect_reals(call_under(p, k.fn, g, precision::Policy::F32), {k.R, k.C}, want);
  }
  // Leading axes are separate matrices.
  const Tensor g = gaussian({2, 3, 5}, 8);
  std::vector<double> want;
  for (int l = 0; l < 2; ++l) {
    const std::vector<double> one(g.reals.begin() + l * 15, g.reals.begin() + (l + 1) * 15);
    const std::vector<double> o = newton_schulz_loops(one, 3, 5);
    want.insert(want.end(), o.begin(), o.end());
  }
  expect_reals(call_under(p, "stacked_2x3x5", g, precision::Policy::F32), {2, 3, 5}, want);
  // The coefficients and eps are arguments.
  const Tensor h = gaussian({3, 5}, 9);
  expect_reals(call_under(p, "coefficients", h, precision::Policy::F32), {3, 5},
               newton_schulz_loops(h.reals.to_vector(), 3, 5, 2.0, -1.5, 0.5, 1e-3));
}

TEST(PreludeNewtonSchulz, IteratesInBf16UnderTheF64PolicyToo) {
  interp::testing::Program p(kCalls);
  const Tensor g = gaussian({8, 32}, 3);
  for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16}) {
    const Tensor o = call_under(p, "wide_8x32", g, policy);
    for (double v : o.reals) ASSERT_EQ(v, bf16(v)) << "policy " << precision::policy_name(policy);
  }
  // A zero gradient divides 0 by eps: 0, not NaN.
  const Tensor zero = call_under(p, "wide_3x5", Tensor::real({3, 5}), precision::Policy::F32);
  for (double v : zero.reals) EXPECT_EQ(v, 0.0);
}

/// The eigenvalues of a symmetric n × n matrix (row-major), by cyclic Jacobi rotations.
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += a[p * n + q] * a[p * n + q];
    if (off < 1e-30) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        if (a[p * n + q] == 0.0) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * a[p * n + q]);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double cs = 1.0 / std::sqrt(t * t + 1.0), sn = t * cs;
        for (int k = 0; k < n; ++k) {  // columns p and q
          const double kp = a[k * n + p], kq = a[k * n + q];
          a[k * n + p] = cs * kp - sn * kq;
          a[k * n + q] = sn * kp + cs * kq;
        }
        for (int k = 0; k < n; ++k) {  // rows p and q
          const double pk = a[p * n + k], qk = a[q * n + k];
          a[p * n + k] = cs * pk - sn * qk;
          a[q * n + k] = sn * pk + cs * qk;
        }
      }
  }
  std::vector<double> d(n);
  for (int i = 0; i < n; ++i) d[i] = a[i * n + i];
  return d;
}

/// The singular values of an R × C matrix: √ of the eigenvalues of the smaller Gram matrix.
std::vector<double> singular_values(const std::vector<double>& m, int R, int C) {
  const int n = std::min(R, C);
  std::vector<double> gram(n * n, 0.0);
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < std::max(R, C); ++k)
        gram[p * n + q] += R <= C ? m[p * C + k] * m[q * C + k] : m[k * C + p] * m[k * C + q];
  std::vector<double> s = symmetric_eigenvalues(gram, n);
  for (double& v : s) v = std::sqrt(std::max(v, 0.0));
  return s;
}

TEST(PreludeNewtonSchulz, LeavesTheSingularValuesInTheQuinticsBand) {
  // The quintic p(x) = a·x + b·x³ + c·x⁵ raises small singular values by
  // about a = 3.44 a step and maps [0.68, 1.2024] into itself (its maximum on
  // [0, 1] is 1.2024, at x = 0.5545; p(1) = 0.7015), so five steps from
  // g / ‖g‖_F leave every singular value in that band, with bf16's rounding
  // (2⁻⁸ relative) on top: about [0.7, 1.2]. (PyTorch's docstring: S' is
  // roughly uniform on (0.5, 1.5).) Inputs whose smallest singular value is
  // not tiny against ‖g‖_F: rectangular Gaussians, and a square one made
  // diagonally dominant.
  constexpr double kLow = 0.66, kHigh = 1.22;
  interp::testing::Program p(kCalls);
  Tensor square = gaussian({16, 16}, 4);
  for (int i = 0; i < 16; ++i) square.reals[i * 16 + i] += 0.05;
  struct Case {
    const char* fn;
    Tensor g;
    int R, C;
  };
  for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32}) {
    for (const Case& k :
         {Case{"wide_8x32", gaussian({8, 32}, 1), 8, 32}, Case{"tall_32x8", gaussian({32, 8}, 2), 32, 8},
          Case{"square_16x16", square, 16, 16}, Case{"wide_1x6", gaussian({1, 6}, 5), 1, 6},
          Case{"stacked_3x8x12", gaussian({3, 8, 12}, 6), 8, 12}}) {
      SCOPED_TRACE(std::string(k.fn) + " under " + precision::policy_name(policy));
      const Tensor o = call_under(p, k.fn, k.g, policy);
      const int64_t copies = o.size() / (k.R * k.C);
      for (int64_t l = 0; l < copies; ++l) {
        const std::vector<double> one(o.reals.begin() + l * k.R * k.C, o.reals.begin() + (l + 1) * k.R * k.C);
        for (double s : singular_values(one, k.R, k.C)) {
          EXPECT_GE(s, kLow);
          EXPECT_LE(s, kHigh);
        }
      }
    }
  }
}

}  // namespace
}  // namespace quire::prelude
