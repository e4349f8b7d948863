#pragma once
// Helpers shared by the tests of the kernel backends (kernel/, native/): a
// call run both in the reference interpreter and compiled, by the executor
// on a kernel engine, compared leaf by leaf, bit for bit, under every policy.
// (A test header: it reaches up to compile/, which runs the kernels.)

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/kernel/engine.h"

namespace quire::kernel::testing {

using interp::Value;
using precision::Policy;


/// Every leaf of `got` has the bits, kind, shape and realized type of `want`'s.
inline void expect_same(const Value& got, const Value& want, const std::string& path) {
  ASSERT_EQ(got.kind, want.kind) << path;
  switch (want.kind) {
    case Value::Kind::Tensor: {
      ASSERT_EQ(got.tensor.kind, want.tensor.kind) << path;
      ASSERT_EQ(got.tensor.shape, want.tensor.shape) << path;
      EXPECT_EQ(got.type, want.type) << path;
      EXPECT_EQ(got.tensor.ints, want.tensor.ints) << path;
      ASSERT_EQ(got.tensor.reals.size(), want.tensor.reals.size()) << path;
      for (size_t i = 0; i < want.tensor.reals.size(); ++i)
        EXPECT_TRUE(interp::testing::same_bits(got.tensor.reals[i], want.tensor.reals[i])) << path << "[" << i << "]";
      break;
    }
    case Value::Kind::Tuple:
      ASSERT_EQ(got.elements.size(), want.elements.size()) << path;
      for (size_t i = 0; i < want.elements.size(); ++i)
        expect_same(got.elements[i], want.elements[i], path + "." + std::to_string(i));
      break;
    case Value::Kind::Params:
      ASSERT_EQ(got.params->size(), want.params->size()) << path;
      for (const auto& [leaf, t] : *want.params)
        expect_same(Value::of(got.params->at(leaf)), Value::of(t), path + "." + leaf);
      break;
    case Value::Kind::Host: EXPECT_EQ(got.host, want.host) << path; break;
    case Value::Kind::Key: break;
  }
}

struct Runs {
  Value reference, kernels;
  int64_t kernel_launches = 0, runtime_launches = 0;
};

/// The shipped profile with free launches, spawns and vector lanes: every
/// kernel's plan takes the most lanes and the widest split its space has,
/// so a run under it exercises every layout a kernel can get.
inline machine::Profile eager_profile() {
  machine::Profile p = machine::shipped_profile();
  p.layout->launch_seconds = 0;
  p.layout->spawn_seconds = 0;
  p.layout->lane_speedup = 1000;
  // Every product that can be packed is: its fold's operations cost the most.
  p.layout->op_seconds = 1e-3;
  p.layout->packed_flops = 1e30;
  p.layout->error = 0;
  return p;
}

/// Calls `fn` on `args` under `options` twice: one instruction at a time by
/// the reference interpreter, and compiled (compile/compile.h) then run by
/// the executor (compile/executor.h) with `runner`, its kernels planned
/// under `plan` for `threads` threads when given.
inline Runs run_both(const elab::Program& prog, int fn, const std::vector<Value>& args,
                     const std::map<std::string, int64_t>& dims, const precision::RealizeOptions& options,
                     KernelRunner& runner, interp::Remat remat = interp::Remat::Recompute,
                     const machine::Profile* plan = nullptr, int threads = 1) {
  compile::CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize = options;
  request.remat = remat;
  request.profile = plan;
  request.threads = threads;
  request.arguments = &args;
  const compile::CompiledProgram c = compile::compile(prog, request);
  Runs out;
  interp::Interpreter reference(prog, dims, c.realization.get());
  reference.set_remat(remat);
  out.reference = reference.call(fn, args);
  KernelEngine engine(c.catalog, runner);
  compile::Executor executor(prog, c, engine);
  out.kernels = executor.call(args);
  out.kernel_launches = engine.kernel_launches();
  out.runtime_launches = engine.runtime_launches();
  return out;
}

inline std::vector<precision::RealizeOptions> every_policy() {
  std::vector<precision::RealizeOptions> all;
  for (Policy p : {Policy::F64, Policy::F32, Policy::BF16, Policy::F16}) {
    precision::RealizeOptions o;
    o.policy = p;
    all.push_back(o);
    if (p == Policy::F32 || p == Policy::BF16) {
      // `--product-step fma`: f32 accumulators of f32 and of bf16 operands.
      precision::RealizeOptions fused = o;
      fused.fused_products = true;
      all.push_back(fused);
    }
    if (p == Policy::BF16 || p == Policy::F16) {
      o.half_intermediates = true;
      all.push_back(o);
    }
  }
  return all;
}

inline std::string label(const precision::RealizeOptions& o) {
  return std::string(precision::policy_name(o.policy)) + (o.half_intermediates ? "+half-intermediates" : "") +
         (o.fused_products ? "+fma" : "");
}

inline std::vector<Value> drawn_arguments(const elab::Program& prog, int fn, const std::map<std::string, int64_t>& dims) {
  const core::Function& f = prog.functions[static_cast<size_t>(fn)];
  std::optional<interp::ParamMap> params;
  if (!f.args.empty() && f.args[0].type.kind == elab::TypeKind::Params)
    params = interp::init_params(prog, f.args[0].type.params, 7, dims);
  return interp::entry_arguments(prog, fn, params ? &*params : nullptr, dims, 7, std::nullopt);
}

inline std::vector<double> specials_and_random(size_t n, uint64_t seed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(), 1e-310, -3e38, 7e4, 1.0,
                           -1.0, 2.0, 0.5};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-6, 6);
  while (v.size() < n) v.push_back(d(rng));
  v.resize(n);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

/// Functions covering every operation the lowering takes: every unary and
/// binary operation, comparisons, `where`, casts, every reduction (over some
/// axes, all of them, with `...`), `dot` and a batched `contract`, a
/// `precision(bf16)` region, a `numerics(high)` island, and integers.
inline const char* kOperations = R"(
fn unary(x : ℝ[b: 3, n: 8]) -> ℝ[b: 3, n: 8] =
  let u = -x + abs(x) * exp(x * 0.25) - log(abs(x) + 1.0) + sqrt(abs(x)) + rsqrt(abs(x) + 0.5) + tanh(x)
  u + erf(x) + sigmoid(x) + relu(x) + gelu(x) + gelu_tanh(x) + silu(x) + x^3 + x^2
fn unary_libm(x : ℝ[b: 3, n: 8]) -> (ℝ[b: 3, n: 8], ℝ[b: 3, n: 8], ℝ[b: 3, n: 8], ℝ[b: 3, n: 8]) =
  (log1p(x), log1p(abs(x)), expm1(x), softplus(x * 4.0))
fn binary(x : ℝ[b: 3, n: 8], y : ℝ[n: 8], e : ℝ[]) -> ℝ[b: 3, n: 8] =
  max(x, y) + min(x, y) * 2.0 + x / y + abs(x)^e + abs(x)^y + where(x > y, x, y) + where(x ≤ 0.0, 1.0, -1.0)
fn tests(x : ℝ[b: 3, n: 8], y : ℝ[n: 8]) -> bool[b: 3, n: 8] = not(x < y) == (x ≠ y)
fn casts(x : ℝ[b: 3, n: 8]) -> ℝ[b: 3, n: 8] = (x as bf16) + (x as f16) * (x as f32)
fn reductions(x : ℝ[b: 3, n: 8]) -> ℝ[b: 3] =
  sum(axis n, x) + mean(axis n, x) + max(axis n, x) + min(axis n, x) + logsumexp(axis n, x)
fn whole(x : ℝ[b: 3, n: 8]) -> ℝ[] = sum(x) + logsumexp(axis b, axis n, x) + mean(x * x)
fn lead(x : ℝ[..., n: 8]) -> ℝ[..., n: 8] = x * 2.0 + sum(axis n, x)
fn products(x : ℝ[b: 3, n: 8], w : ℝ[n: 8, m: 5], a : ℝ[b: 3, k: 4, i: 2], c : ℝ[b: 3, k: 4, j: 5]) -> ℝ[b: 3, i: 2, j: 5] =
  contract(axis k, a, c) + sum(axis m, x · w)
fn region(x : ℝ[b: 3, n: 8], w : ℝ[n: 8, m: 5]) -> ℝ[b: 3, m: 5] = precision(bf16) { x · w } + numerics(high) { (x · w) * 0.5 }
fn ints(i : i32[n: 8], x : ℝ[n: 8]) -> ℝ[n: 8] = (i as f64) * x + x
fn int_arith(i : i32[n: 8]) -> i32[n: 8] = i + i * i
)";

/// Each function of kOperations with its arguments: random values mixed with
/// ±0, ±inf, NaN, a subnormal and values beyond the halves' ranges.
inline std::vector<std::pair<std::string, std::vector<runtime::Tensor>>> operation_calls() {
  auto x = interp::testing::reals({3, 8}, specials_and_random(24, 1));
  auto y = interp::testing::reals({8}, specials_and_random(8, 2));
  auto w = interp::testing::reals({8, 5}, specials_and_random(40, 3));
  auto a = interp::testing::reals({3, 4, 2}, specials_and_random(24, 4));
  auto c = interp::testing::reals({3, 4, 5}, specials_and_random(60, 5));
  auto lead = interp::testing::reals({2, 3, 8}, specials_and_random(48, 6));
  auto i = interp::testing::ints(runtime::ElemKind::I32, {8}, {-3, 0, 1, 2, 5, 100, -7, 9});
  const runtime::Tensor e = runtime::Tensor::scalar(2.0);
  return {
      {"unary", {x}},        {"unary_libm", {x}},
      {"binary", {x, y, e}}, {"binary", {x, y, runtime::Tensor::scalar(0.5)}},
      {"tests", {x, y}},     {"casts", {x}},
      {"reductions", {x}},   {"whole", {x}},
      {"lead", {lead}},      {"products", {x, w, a, c}},
      {"region", {x, w}},    {"ints", {i, y}},
      {"int_arith", {i}},
  };
}

/// The tutorial's `loss` at B = 4 and its training step (the vjp of loss),
/// with the arguments `quire run` draws for each.
struct TutorialStep {
  std::unique_ptr<elab::testing::Elaborated> e = elab::testing::elaborate_tutorial();
  std::map<std::string, int64_t> dims = {{"B", 4}};
  int loss = -1, step = -1;
  std::vector<Value> loss_args, step_args;

  TutorialStep() {
    EXPECT_TRUE(e->ok()) << e->rendered();
    elab::Program& prog = *e->prog;
    loss = prog.find_function("loss");
    step = grad::vjp(prog, loss, grad::differentiable_args(prog.functions[static_cast<size_t>(loss)]));
    loss_args = drawn_arguments(prog, loss, dims);
    step_args = loss_args;
    step_args.push_back(Value::of(runtime::Tensor::scalar(1.0)));
  }
  const elab::Program& prog() const { return *e->prog; }
};

}  // namespace quire::kernel::testing
