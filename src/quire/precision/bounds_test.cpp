// The bounds against what they promise and against hand-derived numbers:
// every rule's bound, the running one included, is at least the gap the typed
// interpreter measures against the exact reference on the envelope's samples
// (the tutorial, its vjp and hand-written programs, under f64, f32, bf16, f16
// and a solved-like assignment), and the probabilistic estimate is at most
// the running bound; a sum under f32 and a cancelling sum give the formulas'
// exact values; a division by a value whose smallest |x| is 0 is +inf under
// the envelope's rules, naming its site, and under the running rule where its
// own divisor is 0 or within its error; the running bound stays finite and
// within 10³ of the gap through a ten-block residual tower of RMSNorm blocks,
// where the envelope's rules are +inf; the CLI refuses a missing, malformed
// or foreign envelope.

#include "quire/precision/bounds.h"
#include "quire/precision/bounds_print.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "quire/core/printer.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/interp/params.h"
#include "quire/precision/measure.h"
#include "quire/precision/running_bounds.h"
#include "quire/realize/realization_file.h"
#include "quire/support/cli_testing.h"
#include "quire/support/testing.h"

namespace quire::precision {
namespace {

namespace fs = std::filesystem;
using interp::Value;
using interp::testing::Program;
using interp::testing::reals;

constexpr int kComp = static_cast<int>(BoundRule::Componentwise);
constexpr int kNorm = static_cast<int>(BoundRule::Normwise);
constexpr int kCond = static_cast<int>(BoundRule::Cond);
constexpr int kRunning = static_cast<int>(BoundRule::Running);

/// The tutorial's program (07_train.qr and the files it imports).
std::unique_ptr<elab::testing::Elaborated> tutorial() {
  auto e = elab::testing::elaborate_tutorial();
  EXPECT_TRUE(e->ok()) << e->rendered();
  return e;
}

/// An envelope as `quire calibrate --samples K --seed 0` makes it, with its samples.
struct Calibrated {
  Envelope envelope;
  std::vector<std::vector<Value>> samples;
};

Calibrated calibrate_drawn(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims, int k) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  std::optional<interp::ParamMap> params;
  if (!fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params)
    params = interp::init_params(prog, fn.args[0].type.params, 0, dims);
  Calibrated c;
  for (int s = 0; s < k; ++s)
    c.samples.push_back(interp::entry_arguments(prog, entry, params ? &*params : nullptr, dims,
                                                static_cast<uint64_t>(s), std::nullopt));
  c.envelope = calibrate(prog, entry, dims, c.samples, 128);
  return c;
}

/// Every rule's bound against the measured gap, and the invariants between the rules.
BoundsReport expect_sound(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                          const Calibrated& c, const RealizeOptions& options, const Sensitivities* sens,
                          const std::string& what, bool finite = false) {
  const Realization r = realize(prog, entry, options, dims);
  const BoundsReport b = bound_errors(prog, entry, dims, r, c.envelope, c.samples, sens);
  if (finite) {
    for (int k = 0; k < kBoundRules; ++k) {
      EXPECT_TRUE(std::isfinite(b.rules[static_cast<size_t>(k)].bound)) << what << "\n" << print_bounds(b, 40);
    }
  }
  const std::vector<exact::ExactValue> reference = exact_outputs(prog, entry, dims, c.samples, 128);
  const double gap = measure_gaps(prog, entry, dims, r, c.samples, reference).worst();
  EXPECT_FALSE(std::isnan(gap)) << what;
  for (int k = 0; k < kBoundRules; ++k)
    EXPECT_GE(b.rules[static_cast<size_t>(k)].bound, gap)
        << what << ": " << bound_rule_name(static_cast<BoundRule>(k)) << "\n"
        << print_bounds(b, 40);
  if (sens) {
    EXPECT_TRUE(b.estimate.has_value() && std::isfinite(*b.estimate)) << what << ": " << b.estimate_absent;
  }
  // The probabilistic estimate reads the running bound's forms with their roundings as random: never above it.
  EXPECT_LE(b.probabilistic.estimate, b.rules[kRunning].bound) << what;
  EXPECT_EQ(b.probabilistic.confidence, kEstimateConfidence) << what;
  // cond never exceeds componentwise: its S is the smaller of the two, and every rule is monotone.
  for (const SiteBound& s : b.sites) {
    if (std::isfinite(s.bound[kComp])) {
      EXPECT_LE(s.bound[kCond], s.bound[kComp]) << what << ": " << s.site;
    }
  }
  return b;
}

TEST(BoundsSoundness, TheTutorialUnderEachPolicyAndASolvedAssignment) {
  auto e = tutorial();
  elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims{{"B", 4}};
  const int entry = prog.find_function("loss");
  const Calibrated c = calibrate_drawn(prog, entry, dims, 2);
  // envelope_samples rebuilds exactly these samples from the envelope's seed.
  Envelope seeded = c.envelope;
  seeded.seed = 0;
  const auto rebuilt = envelope_samples(prog, entry, seeded, 0, 2);
  ASSERT_EQ(rebuilt.size(), 2u);
  EXPECT_EQ(rebuilt[1][1].elements[0].tensor.reals, c.samples[1][1].elements[0].tensor.reals);
  const Sensitivities sens = envelope_sensitivities(prog, entry, dims, c.samples, 128);

  for (Policy p : {Policy::F64, Policy::F32, Policy::BF16, Policy::F16})
    expect_sound(prog, entry, dims, c, RealizeOptions{p, false, nullptr, false}, &sens, policy_name(p));
  expect_sound(prog, entry, dims, c, RealizeOptions{Policy::BF16, true, nullptr, false}, &sens,
               "bf16, half accumulators");

  // Like a solver's decisions: products and the norm in f32 or bf16, parameters narrowed.
  Assignment a;
  a.policy = Policy::F64;
  a.sites = {{"Linear.apply/%4", FloatType::F32},  {"RMSNorm.apply/%4", FloatType::F32},
             {"RMSNorm.apply/%5", FloatType::F32}, {"RMSNorm.apply/%9", FloatType::BF16},
             {"Block.apply/%6", FloatType::BF16},  {"loss/%7", FloatType::F32}};
  a.params = {{"blocks.proj.w", FloatType::F32}, {"blocks.norm.γ", FloatType::BF16}, {"head.b", FloatType::BF16}};
  ASSERT_EQ(check_assignment(prog, entry, a, dims), std::vector<std::string>{});
  expect_sound(prog, entry, dims, c, RealizeOptions{Policy::F64, false, &a, false}, &sens, "solved-like");

  // Under f64 every bound is finite and small. (Not tiny: each block's division by
  // √(mean x² + ε), min 0.46 over the envelope, amplifies a worst-case error by hundreds.)
  const Realization f64 = realize(prog, entry, RealizeOptions{}, dims);
  const BoundsReport b = bound_errors(prog, entry, dims, f64, c.envelope, c.samples, &sens);
  for (int k = 0; k < kBoundRules; ++k) {
    EXPECT_TRUE(std::isfinite(b.rules[static_cast<size_t>(k)].bound)) << b.rules[static_cast<size_t>(k)].covers;
    EXPECT_LT(b.rules[static_cast<size_t>(k)].bound, 1e-4 * b.magnitude);
  }
  EXPECT_EQ(b.entry, "loss");
  EXPECT_EQ(b.label, "f64");
  EXPECT_NE(b.rules[kComp].covers.find("the envelope's 2 samples"), std::string::npos) << b.rules[kComp].covers;
}

TEST(BoundsSoundness, TheTutorialsVjpThroughTheReverseSweep) {
  // loss.vjp: the reverse sweep's own operations (fold_vjp, sum_to, expand,
  // contract_grad_a/b, params), its output a tuple of L and every gradient.
  auto e = tutorial();
  elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims{{"B", 4}};
  const int loss = prog.find_function("loss");
  const Calibrated forward = calibrate_drawn(prog, loss, dims, 2);
  envelope_sensitivities(prog, loss, dims, forward.samples, 128);  // appends loss.vjp
  const int entry = prog.find_function("loss.vjp");
  ASSERT_GE(entry, 0);
  Calibrated c;
  for (std::vector<Value> args : forward.samples) {
    args.push_back(Value::of(runtime::Tensor::scalar(1.0)));
    c.samples.push_back(std::move(args));
  }
  c.envelope = calibrate(prog, entry, dims, c.samples, 128);
  for (Policy p : {Policy::F64, Policy::F32, Policy::BF16}) {
    const BoundsReport b = expect_sound(prog, entry, dims, c, RealizeOptions{p, false, nullptr, false}, nullptr,
                                        fmt::format("loss.vjp under {}", policy_name(p)), /*finite=*/p == Policy::F64);
    EXPECT_FALSE(b.tensor_output);  // (L, ∂θ, ∂batch): the bounds are over every real leaf
    EXPECT_NE(print_bounds(b).find("magnitude   -  (the output loss.vjp/"), std::string::npos) << print_bounds(b);
  }
}

TEST(BoundsSoundness, HandWrittenProgramsUnderEachPolicy) {
  const char* programs[] = {
      // element-wise functions, their library errors and their domains
      "fn f(x : ℝ[6], y : ℝ[6]) -> ℝ[] =\n"
      "  sum(tanh(x) * sigmoid(y) + gelu(x) - silu(y) + sqrt(x^2 + 1.0) + exp(y / 4.0) + log(1.0 + y^2)\n"
      "      + rsqrt(2.0 + x^2) + max(x, y) + relu(x) + abs(y) + erf(x) + x / (2.0 + y^2))\n",
      // reductions, a contraction, softmax and logsumexp
      "fn f(x : ℝ[r: 3, n: 5], w : ℝ[n: 5, m: 4]) -> ℝ[] =\n"
      "  mean(softmax(x · w)) + sum(log_softmax(x)) / 10.0 + sum(logsumexp(axis n, x)) + max(axis r, axis n, x)\n",
      // a condition that may flip under a narrow input
      "fn f(x : ℝ[8]) -> ℝ[] = sum(where(x > 0.0, x, 0.5 * x)) + mean(x^3)\n",
  };
  for (const char* text : programs) {
    Program p(text);
    elab::Program& prog = *p.e->prog;
    const int entry = p.index("f");
    const Calibrated c = calibrate_drawn(prog, entry, {}, 3);
    const Sensitivities sens = envelope_sensitivities(prog, entry, {}, c.samples, 128);
    // Every divisor, logarithm and root here is away from 0: under f64 all bounds are finite.
    for (Policy pol : {Policy::F64, Policy::F32, Policy::BF16, Policy::F16})
      expect_sound(prog, entry, {}, c, RealizeOptions{pol, false, nullptr, false}, &sens,
                   fmt::format("{} under {}", text, policy_name(pol)), /*finite=*/pol == Policy::F64);
  }
}

TEST(BoundsRunning, TheTutorialWithinAThousandTimesTheGapUnderF64) {
  // The envelope's rules are 10⁹ above the gap here (the norm's division meets the largest x
  // of one row and the smallest norm of another); the running rule divides each row by its own.
  auto e = tutorial();
  elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims{{"B", 4}};
  const int entry = prog.find_function("loss");
  const Calibrated c = calibrate_drawn(prog, entry, dims, 2);
  const Realization f64 = realize(prog, entry, RealizeOptions{}, dims);
  const BoundsReport b = bound_errors(prog, entry, dims, f64, c.envelope, c.samples, nullptr);
  const double gap = measure_gaps(prog, entry, dims, f64, c.samples, exact_outputs(prog, entry, dims, c.samples, 128))
                         .worst();
  ASSERT_GT(gap, 0);
  EXPECT_GE(b.rules[kRunning].bound, gap);
  EXPECT_LE(b.rules[kRunning].bound, 1e3 * gap) << print_bounds(b, 30);
  EXPECT_GT(b.rules[kComp].bound, 1e6 * gap);  // the contrast the rule is for
  EXPECT_NE(b.rules[kRunning].covers.find("the envelope's own 2 samples, not on other inputs"), std::string::npos)
      << b.rules[kRunning].covers;
  // Every site the walk evaluated has its running bound, each at most the componentwise one's.
  for (const SiteBound& s : b.sites) {
    EXPECT_FALSE(std::isnan(s.bound[kRunning])) << s.site;
    EXPECT_LE(s.bound[kRunning], s.bound[kComp]) << s.site;
  }
}

/// Ten residual blocks x + W·gelu(RMSNorm(x)) of width 16, then a head: the
/// tower the envelope's rules cannot bound even under f64.
constexpr const char* kTower =
    "const D : nat = 16\n"
    "const L : nat = 10\n"
    "module RMSNorm {\n"
    "  param γ : ℝ[D]  init = ones\n"
    "  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] =\n"
    "    let ms = mean(axis model, x^2)\n"
    "    x / sqrt(ms + 1e-6) * γ\n"
    "}\n"
    "module Linear {\n"
    "  param w : ℝ[D, D]  init = xavier_uniform\n"
    "  param b : ℝ[D]     init = zeros\n"
    "  fn apply(x : ℝ[..., D]) -> ℝ[..., D] = x · w + b\n"
    "}\n"
    "module Block {\n"
    "  use norm : RMSNorm\n"
    "  use proj : Linear\n"
    "  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] = x + proj.apply(gelu(norm.apply(x)))\n"
    "}\n"
    "module Tower {\n"
    "  use blocks : stack{L}(Block)\n"
    "  use head   : Linear\n"
    "  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] = head.apply(blocks.apply(x))\n"
    "}\n"
    "fn loss(θ : params Tower, x : ℝ[batch: 8, model: D]) -> ℝ[] = mean(Tower.apply(θ, x)^2)\n";

TEST(BoundsRunning, ATenBlockTowerIsFiniteUnderF64AndF32) {
  Program p(kTower);
  elab::Program& prog = *p.e->prog;
  const int entry = p.index("loss");
  const Calibrated c = calibrate_drawn(prog, entry, {}, 1);
  const std::vector<exact::ExactValue> reference = exact_outputs(prog, entry, {}, c.samples, 128);
  for (Policy pol : {Policy::F64, Policy::F32}) {
    const Realization r = realize(prog, entry, RealizeOptions{pol, false, nullptr, false}, {});
    const BoundsReport b = bound_errors(prog, entry, {}, r, c.envelope, c.samples, nullptr);
    const double gap = measure_gaps(prog, entry, {}, r, c.samples, reference).worst();
    const std::string what = fmt::format("the tower under {}\n{}", policy_name(pol), print_bounds(b, 10));
    ASSERT_GT(gap, 0) << what;
    EXPECT_TRUE(std::isinf(b.rules[kComp].bound)) << what;  // a division by another row's norm
    EXPECT_TRUE(std::isfinite(b.rules[kRunning].bound)) << what;
    EXPECT_GE(b.rules[kRunning].bound, gap) << what;
    EXPECT_LE(b.rules[kRunning].bound, 1e3 * gap) << what;
    EXPECT_LE(b.probabilistic.estimate, b.rules[kRunning].bound) << what;
  }
}

TEST(BoundsHandChecked, ASumOfThreeValuesUnderF32) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const elab::Program& prog = *p.e->prog;
  const int entry = p.index("f");
  const std::vector<std::vector<Value>> samples{{Value::of(reals({3}, {1e8, 1, -1e8}))}};
  const Envelope env = calibrate(prog, entry, {}, samples, 128);
  const Realization r = realize(prog, entry, RealizeOptions{Policy::F32, false, nullptr, false}, {});
  const BoundsReport b = bound_errors(prog, entry, {}, r, env, samples, nullptr);

  // By hand. The input enters f32: δx = u·M + η/2, M = 1e8. The sum's 3 terms are
  // f32 values, so the first step (0 + x₁) is exact and two steps round, each
  // the f64 kernel's rounding then f32's: u_a = (1 + 2⁻⁵³)(1 + 2⁻²⁴) − 1, γ₂ = 2u_a / (1 − 2u_a).
  // Its accumulator is its storage type: the store rounds nothing more.
  const double u = 0x1p-24, eta = 0x1p-149, M = 1e8;
  const double dx = u * M + eta / 2;
  const double ua = (1 + 0x1p-53) * (1 + u) - 1;
  const double g2 = 2 * ua / (1 - 2 * ua);
  const double componentwise = 3 * dx + g2 * (3 * (M + dx));
  EXPECT_DOUBLE_EQ(b.rules[kComp].bound, componentwise);
  // cond: Σ|x| / |Σ x| = (2e8 + 1) / 1 on the sample, |Σ x| = 1, so S = 2e8 + 1 + 3δx < 3(M + δx).
  ASSERT_EQ(env.sites.size(), 1u);
  ASSERT_TRUE(env.sites[0].condition.has_value());
  EXPECT_EQ(*env.sites[0].condition, 2e8 + 1);
  const double cond = 3 * dx + g2 * (2e8 + 1 + 3 * dx);
  EXPECT_DOUBLE_EQ(b.rules[kCond].bound, cond);
  // normwise: E_x = u·√3·M + √3·η/2; the sum maps it by √3 and adds γ₂·√3·(√3·M + E_x).
  const double ex = u * std::sqrt(3.0) * M + std::sqrt(3.0) * eta / 2;
  EXPECT_DOUBLE_EQ(b.rules[kNorm].bound, std::sqrt(3.0) * ex + g2 * std::sqrt(3.0) * (std::sqrt(3.0) * M + ex));
  // The numbers themselves: 5.36e1 componentwise against 4.17e1 by the condition number.
  EXPECT_NEAR(b.rules[kComp].bound, 53.644, 1e-3);
  EXPECT_NEAR(b.rules[kCond].bound, 41.723, 1e-3);
  EXPECT_LT(b.rules[kCond].bound, b.rules[kComp].bound);
  // f32 computes 1e8 + 1 = 1e8, then 0: the gap is 1, under every bound.
  const double gap = measure_gaps(prog, entry, {}, r, samples, exact_outputs(prog, entry, {}, samples, 128)).worst();
  EXPECT_EQ(gap, 1.0);
  EXPECT_NE(b.rules[kCond].covers.find("1 sum or contraction no worse conditioned than recorded (the worst 2.0000e8)"),
            std::string::npos)
      << b.rules[kCond].covers;
}

TEST(BoundsHandChecked, AnExactSumUnderF64HasOnlyItsRoundings) {
  Program p("fn f(x : ℝ[4]) -> ℝ[] = sum(x)\n");
  const elab::Program& prog = *p.e->prog;
  const int entry = p.index("f");
  const std::vector<std::vector<Value>> samples{{Value::of(reals({4}, {0.5, 0.25, 2, 1}))}};
  const Envelope env = calibrate(prog, entry, {}, samples, 128);
  const BoundsReport b =
      bound_errors(prog, entry, {}, realize(prog, entry, RealizeOptions{}, {}), env, samples, nullptr);
  // f64 inputs enter exactly; three rounded steps of f64 over S = 4·2, then no store rounding.
  const double u = 0x1p-53;
  EXPECT_DOUBLE_EQ(b.rules[kComp].bound, 3 * u / (1 - 3 * u) * 8);
  // All terms positive: condition 1, so S = |Σ x| = 3.75.
  EXPECT_DOUBLE_EQ(b.rules[kCond].bound, 3 * u / (1 - 3 * u) * 3.75);
}

TEST(BoundsHandChecked, ADivisionByAValueWhoseSmallestIsZeroIsInfinite) {
  Program p("fn f(x : ℝ[2], y : ℝ[2]) -> ℝ[] = sum(where(y > 0.0, x / y, x))\n");
  const elab::Program& prog = *p.e->prog;
  const int entry = p.index("f");
  const std::vector<std::vector<Value>> samples{{Value::of(reals({2}, {1, 2})), Value::of(reals({2}, {0, 2}))}};
  const Envelope env = calibrate(prog, entry, {}, samples, 128);
  const BoundsReport b =
      bound_errors(prog, entry, {}, realize(prog, entry, RealizeOptions{}, {}), env, samples, nullptr);
  std::string div;
  for (const core::Instr& in : prog.functions.at(static_cast<size_t>(entry)).body)
    if (in.op == core::Op::Div) div = core::site_name(prog.functions.at(static_cast<size_t>(entry)), in.id);
  ASSERT_FALSE(div.empty());
  for (int k = 0; k < kEnvelopeRules; ++k) {
    const RuleBound& rule = b.rules[static_cast<size_t>(k)];
    EXPECT_TRUE(std::isinf(rule.bound));
    ASSERT_TRUE(rule.infinite.has_value());
    EXPECT_EQ(rule.infinite->site, div);
    EXPECT_NE(rule.infinite->why.find("a division by values whose smallest |x| (0.0000e0)"), std::string::npos)
        << rule.infinite->why;
    EXPECT_NE(rule.covers.find("+inf from " + div), std::string::npos) << rule.covers;
  }
  // The running rule divides each element by its own divisor, and `where` takes the exact run's
  // branch where its condition cannot flip: the element divided by 0 never reaches the output.
  // What does: x₁ exact, x₂/y₂ = 1 rounded once, and the sum's one rounded step.
  EXPECT_TRUE(std::isfinite(b.rules[kRunning].bound)) << print_bounds(b, 5);
  EXPECT_FALSE(b.rules[kRunning].infinite.has_value());
  EXPECT_LE(b.rules[kRunning].bound, 4 * 0x1p-53 * 2 + 0x1p-1074 * 4) << print_bounds(b, 5);
  const std::string text = print_bounds(b, 5);
  EXPECT_NE(text.find("bound    componentwise  inf  from " + div + ": a division"), std::string::npos) << text;
  EXPECT_NE(bounds_json(b).dump().find("\"bound\":\"inf\""), std::string::npos);
}

TEST(BoundsRunning, ADivisionByItsOwnZeroOrByAValueWithinItsErrorIsInfinite) {
  // A divisor that is 0 on the sample: +inf, the division named.
  Program p("fn f(x : ℝ[2], y : ℝ[2]) -> ℝ[] = sum(x / y)\n");
  const int entry = p.index("f");
  std::string div;
  for (const core::Instr& in : p.prog().functions.at(static_cast<size_t>(entry)).body)
    if (in.op == core::Op::Div) div = core::site_name(p.prog().functions.at(static_cast<size_t>(entry)), in.id);
  const std::vector<std::vector<Value>> zero{{Value::of(reals({2}, {1, 2})), Value::of(reals({2}, {0, 2}))}};
  RunningBounds r = running_bounds(p.prog(), entry, {}, realize(p.prog(), entry, RealizeOptions{}, {}), zero, 128);
  EXPECT_TRUE(std::isinf(r.bound));
  ASSERT_TRUE(r.infinite.has_value());
  EXPECT_EQ(r.infinite->site, div);
  EXPECT_NE(r.infinite->why.find("a division by values whose smallest |x| (0.0000e0) is not above their error"),
            std::string::npos)
      << r.infinite->why;
  // A divisor of 5e-4 computed as y − 1 from y = 1.0005 cast to bf16, which rounds it to 1 (so
  // the typed run divides by 0): its own error, known exactly (y is exact), is 5e-4 too.
  Program q("fn f(x : ℝ[2], y : ℝ[2]) -> ℝ[] = sum(x / ((y as bf16) - 1.0))\n");
  const int g = q.index("f");
  const std::vector<std::vector<Value>> close{{Value::of(reals({2}, {1, 2})), Value::of(reals({2}, {1.0005, 3}))}};
  r = running_bounds(q.prog(), g, {}, realize(q.prog(), g, RealizeOptions{}, {}), close, 128);
  EXPECT_TRUE(std::isinf(r.bound));
  ASSERT_TRUE(r.infinite.has_value());
  EXPECT_NE(r.infinite->why.find("a division by values whose smallest |x| (5.0000e-4) is not above their error (5.0000e-4)"),
            std::string::npos)
      << r.infinite->why;
  EXPECT_EQ(r.infinite->site.find("f/"), 0u) << r.infinite->site;
  EXPECT_EQ(r.estimate, r.bound);
  // Without the cast the divisor is exact, and the bound finite.
  Program exact_divisor("fn f(x : ℝ[2], y : ℝ[2]) -> ℝ[] = sum(x / (y - 1.0))\n");
  r = running_bounds(exact_divisor.prog(), exact_divisor.index("f"), {},
                     realize(exact_divisor.prog(), exact_divisor.index("f"), RealizeOptions{}, {}), close, 128);
  EXPECT_TRUE(std::isfinite(r.bound));
}

TEST(BoundsRunning, ASumOfThreeValuesUnderF32ByHand) {
  // f32 computes 1e8 + 1 = 1e8, then 1e8 − 1e8 = 0: the gap is 1. The values are f32 values (no
  // rounding on entry) and the sum accumulates in f32: its first step is exact, the second
  // rounds 1e8 + 1, the third rounds at most |1 + (the second's error)|, each by
  // u_a = (1 + 2⁻⁵³)(1 + 2⁻²⁴) − 1 (the f64 step, then f32's). The envelope's componentwise rule
  // gives 53.6 and its cond rule 41.7 for the same sum.
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const int entry = p.index("f");
  const std::vector<std::vector<Value>> samples{{Value::of(reals({3}, {1e8, 1, -1e8}))}};
  const Realization r = realize(p.prog(), entry, RealizeOptions{Policy::F32, false, nullptr, false}, {});
  const RunningBounds b = running_bounds(p.prog(), entry, {}, r, samples, 128);
  const double ua = (1 + 0x1p-53) * (1 + 0x1p-24) - 1;
  const double second = ua * (1e8 + 1), third = ua * (1 + second);
  EXPECT_NEAR(b.bound, second + third, 1e-6);
  EXPECT_NEAR(b.bound, 5.96, 0.01);
  const double gap =
      measure_gaps(p.prog(), entry, {}, r, samples, exact_outputs(p.prog(), entry, {}, samples, 128)).worst();
  EXPECT_EQ(gap, 1.0);
  EXPECT_GE(b.bound, gap);
  // Two roundings of independent sign: the estimate is λ·√(second² + third²) ≈ λ·second, λ = √(2 ln 200).
  EXPECT_NEAR(b.lambda, std::sqrt(2 * std::log(200.0)), 1e-12);
  EXPECT_NEAR(b.estimate, std::min(b.bound, b.lambda * std::hypot(second, third)), 1e-6);
  EXPECT_EQ(b.estimate, b.bound);  // λ > 1, and one rounding dominates: no better than the bound
}

TEST(BoundsReportText, ThePrintoutAndTheJson) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x * x)\n");
  elab::Program& prog = *p.e->prog;
  const int entry = p.index("f");
  const Calibrated c = calibrate_drawn(prog, entry, {}, 1);
  const Sensitivities sens = envelope_sensitivities(prog, entry, {}, c.samples, 128);
  const Realization r = realize(prog, entry, RealizeOptions{Policy::F32, false, nullptr, false}, {});
  BoundsReport b = bound_errors(prog, entry, {}, r, c.envelope, c.samples, &sens);
  b.envelope_path = "env.json";
  b.measured = MeasuredGap{1e-8, 1, 0, 128, ""};
  b.held_out = MeasuredGap{2e-8, 4, 1, 128, ""};
  const std::string text = print_bounds(b, 10);
  for (const char* line :
       {"check --precision: `f` under f32\n", "  bound    componentwise  ", "  bound    normwise       ",
        "  bound    cond           ", "  estimate first-order    ", "× the measured gap",
        "  measured                1.0000e-8", "worst of 1 sample, the typed interpreter",
        "  held-out                2.0000e-8", "worst of 4 fresh samples (seeds 1–4)",
        "  envelope    env.json: 1 sample, 2 sites, parameters drawn from seed 0", "(every site, 2 in all)",
        "\nfirst-order: an estimate, not a bound", "  bound    running        ",
        "  estimate probabilistic  ", "(confidence 99 % under independent roundings)\n",
        "\nrunning: a bound for the envelope's own 1 sample, not for other inputs",
        "\nprobabilistic: an estimate, not a bound: the running bound's roundings taken as independent"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  const nlohmann::ordered_json j = bounds_json(b);
  EXPECT_EQ(j["format"], "quire-bounds");
  EXPECT_EQ(j["sites"].size(), 2u);
  EXPECT_TRUE(j["rules"].contains("cond"));
  EXPECT_EQ(j["held_out"]["samples"], 4);
  EXPECT_EQ(j["version"], 3);
  EXPECT_TRUE(j.contains("estimate"));
  EXPECT_TRUE(j["rules"].contains("running"));
  EXPECT_EQ(j["probabilistic"]["confidence"], 0.99);
  EXPECT_NE(j["probabilistic"]["covers"].get<std::string>().find("an estimate, not a bound"), std::string::npos);
  EXPECT_TRUE(j["sites"][0].contains("running"));
  // Not a scalar: the estimate is absent, and says why.
  Program q("fn g(x : ℝ[3]) -> ℝ[3] = x * 2.0\n");
  const Calibrated cq = calibrate_drawn(*q.e->prog, q.index("g"), {}, 1);
  const BoundsReport bq = bound_errors(*q.e->prog, q.index("g"), {}, realize(*q.e->prog, q.index("g"), {}, {}),
                                       cq.envelope, cq.samples, nullptr);
  EXPECT_FALSE(bq.estimate.has_value());
  EXPECT_NE(print_bounds(bq).find("estimate first-order    absent: `g` does not return ℝ[]"), std::string::npos)
      << print_bounds(bq);
}

TEST(BoundsEnvelope, AnotherProgramsEnvelopeIsRefused) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  Program q("fn f(x : ℝ[3]) -> ℝ[] = mean(x * x)\nfn h(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const Calibrated c = calibrate_drawn(*p.e->prog, p.index("f"), {}, 1);
  // Its own program: no mismatch.
  EXPECT_TRUE(envelope_mismatches(*p.e->prog, p.index("f"), c.envelope).empty());
  // Another entry; the same name with another body.
  std::vector<std::string> other = envelope_mismatches(*q.e->prog, q.index("h"), c.envelope);
  ASSERT_FALSE(other.empty());
  EXPECT_EQ(other[0], "the envelope is of `f`, not of `h`");
  std::vector<std::string> body = envelope_mismatches(*q.e->prog, q.index("f"), c.envelope);
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(body[0], "its site f/%2 is a `sum`, but the program's is a `mul`");
  const Realization r = realize(*q.e->prog, q.index("f"), {}, {});
  EXPECT_THROW(bound_errors(*q.e->prog, q.index("f"), {}, r, c.envelope, c.samples, nullptr), std::invalid_argument);
}

TEST(BoundsEnvelope, AnEnvelopeReadBackMatchesItsOwnProgramWhateverItsOperations) {
  // The reducing max and the element-wise one, and both forms of pow: an
  // envelope names each site's operation by its unique name, so reading it
  // back finds the same operation ("its site f/%2 is a `max`, but the
  // program's is a `max`" when the two were told apart by spelling alone).
  Program p(
      "fn f(z : ℝ[n: 5]) -> ℝ[] =\n"
      "  let m = max(axis n, z)\n"
      "  let e = max(z, 0.5)\n"
      "  sum(e ^ 2.0) + m + sum(e ^ z)\n");
  const Calibrated c = calibrate_drawn(*p.e->prog, p.index("f"), {}, 1);
  const Envelope back = envelope_from_json(nlohmann::json::parse(envelope_json(c.envelope).dump()));
  std::set<std::string> ops;
  for (const SiteEnvelope& s : back.sites) ops.insert(s.op);
  for (const char* op : {"reduce_max", "max", "pow_const", "pow"}) EXPECT_TRUE(ops.count(op)) << op;
  EXPECT_EQ(envelope_mismatches(*p.e->prog, p.index("f"), back), std::vector<std::string>{});
}

// ---------------------------------------------------------------------------
// The command line (the built binary beside the tests, as cli_run_test.cpp runs it).

using quire::testing::Outcome;

Outcome quire(const std::string& args) { return quire::testing::run_quire(args); }

/// `path(name)`: a file in the test's folder.
class BoundsCli : public quire::testing::CliTest {
 protected:
  std::string path(const std::string& name) const { return file(name); }
};

TEST_F(BoundsCli, AMissingEnvelopeIsAnErrorNamingIt) {
  const std::string prog = write("p.qr", "fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const Outcome o = quire("check --precision " + path("missing.json") + " " + prog);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_EQ(o.output.rfind("quire: error: " + path("missing.json") + ": ", 0), 0u) << o.output;
}

TEST_F(BoundsCli, AMalformedEnvelopeIsAnErrorNamingTheKey) {
  const std::string prog = write("p.qr", "fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const std::string bad = write("bad.json", "{\"format\": \"quire-envelope\", \"version\": 2}");
  Outcome o = quire("check --precision " + bad + " " + prog);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_EQ(o.output, "quire: error: " + bad + ": key `entry`: missing\n");
  const std::string junk = write("junk.json", "not json");
  o = quire("check --precision " + junk + " " + prog);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_EQ(o.output.rfind("quire: error: " + junk + ": not JSON", 0), 0u) << o.output;
}

TEST_F(BoundsCli, AnEnvelopeOfAnotherEntryOrProgramIsRefused) {
  const std::string a = write("a.qr", "fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const std::string b = write("b.qr", "fn g(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const std::string c = write("c.qr", "fn f(x : ℝ[3]) -> ℝ[] = mean(x * x)\n");
  Outcome o = quire("calibrate " + a + " --entry f --out " + path("env.json"));
  ASSERT_EQ(o.status, 0) << o.output;
  o = quire("check --precision " + path("env.json") + " " + b);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_EQ(o.output, "quire: error: --precision " + path("env.json") + ": the envelope is of `f`, which " + b +
                          " does not define\n");
  o = quire("check --precision " + path("env.json") + " " + c);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("the envelope does not describe `f` of " + c +
                          ":\n  its site f/%2 is a `sum`, but the "
                          "program's is a `mul`"),
            std::string::npos)
      << o.output;
  // A realization solved for another entry.
  const std::string r = write("r.json", realization_file_json("g", Assignment{}, {}).dump());
  o = quire("check --precision " + path("env.json") + " " + a + " --realize @" + r);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_EQ(o.output, "quire: error: --realize " + r + ": the realization was solved for `g`, not for `f`\n");
  // Flags that need --precision, or --measure.
  o = quire("check " + a + " --measure");
  EXPECT_EQ(o.status, 1) << o.output;
  o = quire("check --precision " + path("env.json") + " " + a + " --held-out 2");
  EXPECT_EQ(o.output, "quire: error: --held-out applies with --measure\n");
}

TEST_F(BoundsCli, TheBoundsBesideTheMeasurement) {
  const std::string a = write("a.qr", "fn f(x : ℝ[3]) -> ℝ[] = sum(x * x)\n");
  ASSERT_EQ(quire("calibrate " + a + " --entry f --samples 2 --out " + path("env.json")).status, 0);
  const Outcome o = quire("check --precision " + path("env.json") + " " + a +
                          " --policy bf16 --measure --held-out 3 --out " + path("bounds.json"));
  ASSERT_EQ(o.status, 0) << o.output;
  for (const char* line : {"check --precision: `f` under bf16\n", "× the measured gap", "worst of 2 samples",
                           "worst of 3 fresh samples (seeds 2–4)", "check: wrote "})
    EXPECT_NE(o.output.find(line), std::string::npos) << line << "\n" << o.output;
  EXPECT_TRUE(fs::exists(path("bounds.json")));
}

}  // namespace
}  // namespace quire::precision
