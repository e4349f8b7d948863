// The gradient's solve (`quire solve --of gradient`): on the tutorial the
// realization it accepts keeps ‖∂θ − ∂θ*‖ / ‖∂θ*‖ inside the budget on the
// calibration samples and on held-out ones, decides values of the reverse
// sweep, and moves fewer bytes; each term is the gradient's change with its
// value alone narrowed; a budget f64 cannot meet is refused; an objective
// without parameters has no gradient to budget.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "quire/core/printer.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/interpreter.h"
#include "quire/io/io_error.h"
#include "quire/precision/measure.h"
#include "quire/precision/solver.h"
#include "quire/realize/realization_file.h"

namespace quire::precision {
namespace {

/// The tutorial's objective calibrated on `samples` draws at B = 8.
struct Tutorial {
  std::unique_ptr<elab::testing::Elaborated> e = elab::testing::elaborate_tutorial();
  int loss = -1;
  Envelope envelope;

  explicit Tutorial(int samples = 4) {
    EXPECT_TRUE(e->ok()) << e->rendered();
    loss = e->prog->find_function("loss");
    Envelope draw;
    draw.entry = "loss";
    draw.dims = {{"B", 8}};
    envelope = calibrate(*e->prog, loss, draw.dims, envelope_samples(*e->prog, loss, draw, 0, samples), 128);
  }
  Solution solve(double budget, SolveOptions options = {}) {
    options.budget = budget;
    return solve_gradient(*e->prog, loss, envelope, options);
  }
  /// (θ, batch, 1): the vjp's arguments for the envelope's samples [first, first + count).
  std::vector<std::vector<interp::Value>> vjp_samples(int first, int count) const {
    auto samples = envelope_samples(*e->prog, loss, envelope, first, count);
    for (auto& args : samples) args.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
    return samples;
  }
  Realization realized(const Assignment& a, int vjp) const {
    RealizeOptions ro;
    ro.assignment = &a;
    ro.keep_masters = true;
    return realize(*e->prog, vjp, ro, envelope.dims);
  }
};

TEST(SolverGradient, TheTutorialsGradientIsInsideItsBudgetOnFreshInputs) {
  Tutorial t;
  const Solution s = t.solve(1e-2);
  ASSERT_TRUE(s.accepted) << print_solution(s);
  EXPECT_EQ(s.of, BudgetOf::Gradient);
  EXPECT_EQ(s.function, "loss.vjp[0]");
  EXPECT_EQ(s.budget_absolute, 1e-2);
  for (double gap : s.measured) EXPECT_LE(gap, 1e-2);
  ASSERT_EQ(s.held_out.size(), 32u);
  for (double gap : s.held_out) EXPECT_LE(gap, 1e-2);
  EXPECT_LT(s.cost, s.cost_all_f64 / 2);

  // It decides the reverse sweep: values of the vjps, named by their own functions.
  int backward = 0;
  for (const auto& [site, type] : s.assignment.sites)
    if (site.find(".vjp") != std::string::npos && type != FloatType::F64) ++backward;
  EXPECT_GT(backward, 5) << print_solution(s);

  // Measured again from the decisions alone, as a training step realizes them.
  elab::Program& prog = *t.e->prog;
  const int vjp = grad::vjp(prog, t.loss, {0});
  const Realization r = t.realized(s.assignment, vjp);
  const auto samples = t.vjp_samples(0, t.envelope.samples);
  const Gaps again = measure_gradient_gaps(prog, vjp, t.envelope.dims, r, samples,
                                           exact_outputs(prog, vjp, t.envelope.dims, samples, 128), true);
  EXPECT_EQ(again.per_sample, s.measured);
  // The decisions are the vjp's: the objective alone does not store the reverse sweep's values.
  EXPECT_TRUE(check_assignment(prog, vjp, s.assignment, t.envelope.dims).empty());
  EXPECT_FALSE(check_assignment(prog, t.loss, s.assignment, t.envelope.dims).empty());
  const std::string text = print_solution(s);
  EXPECT_NE(text.find("solve: the gradient of `loss` (∂θ, by `loss.vjp[0]`) under a budget of 1.0000e-2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("32 of 32 inside the budget"), std::string::npos) << text;
}

TEST(SolverGradient, EachTermIsTheGradientsChangeWithThatValueAloneNarrowed) {
  Tutorial t(2);
  const Solution s = t.solve(1e-2);
  elab::Program& prog = *t.e->prog;
  const int vjp = grad::vjp(prog, t.loss, {0});
  const auto samples = t.vjp_samples(0, 2);
  const auto reference = exact_outputs(prog, vjp, t.envelope.dims, samples, 128);
  const Realization wide = t.realized({}, vjp);
  int checked = 0;
  for (const Choice& c : s.choices) {
    if (c.rule != Unoffered::None || c.name.find(".vjp") == std::string::npos) continue;
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.alone.count(FloatType::F32) && c.alone.count(FloatType::BF16));
    EXPECT_EQ(c.term_in(FloatType::F64), 0);
    // A narrower type changes the gradient more: bf16 keeps 8 bits, f32 24.
    EXPECT_GT(c.term_in(FloatType::BF16), c.term_in(FloatType::F32));
    Assignment a;
    a.sites[c.name] = FloatType::BF16;
    const Realization r = t.realized(a, vjp);
    double worst = 0;
    for (size_t k = 0; k < samples.size(); ++k) {
      const interp::Value narrowed = interp::Interpreter(prog, t.envelope.dims, &r).call(vjp, samples[k]);
      const interp::Value f64 = interp::Interpreter(prog, t.envelope.dims, &wide).call(vjp, samples[k]);
      worst = std::max(worst, gradient_difference(narrowed, f64) / gradient_norm(reference[k]));
    }
    EXPECT_EQ(c.term_in(FloatType::BF16), worst);
    if (++checked == 3) break;
  }
  EXPECT_EQ(checked, 3);
}

TEST(SolverGradient, ABudgetTheGradientCannotMeetIsRefused) {
  Tutorial t(1);
  const Solution s = t.solve(1e-20, {.held_out = 2});
  EXPECT_FALSE(s.accepted);
  EXPECT_GT(s.worst_measured(), 1e-20);
  for (const Choice& c : s.choices) EXPECT_EQ(c.type, FloatType::F64) << c.name;
  EXPECT_NE(print_solution(s).find("OUTSIDE the budget even at f64"), std::string::npos);
}

TEST(SolverGradient, AnObjectiveWithoutParametersHasNoGradientToBudget) {
  auto e = elab::testing::elaborate_text("fn f(x : ℝ[n: 4]) -> ℝ[] = sum(x * x)\n");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const int f = e->prog->find_function("f");
  Envelope draw;
  draw.entry = "f";
  const Envelope envelope = calibrate(*e->prog, f, {}, envelope_samples(*e->prog, f, draw, 0, 1), 128);
  EXPECT_THROW(solve_gradient(*e->prog, f, envelope, {}), std::invalid_argument);
}

// The file says what its budget bounds; files before version 3 are the output's.
TEST(RealizationFile, WhatTheBudgetBoundsRoundTrips) {
  Assignment a;
  a.sites["loss.vjp[0]/%12"] = FloatType::BF16;
  const nlohmann::json j = realization_file_json("loss", a, {}, nullptr, BudgetOf::Gradient);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["of"], "gradient");
  const RealizationFile back = realization_file_from_json(j, "r.json");
  EXPECT_EQ(back.of, BudgetOf::Gradient);
  EXPECT_EQ(back.assignment.sites, a.sites);

  nlohmann::json old = j;
  old["version"] = 2;
  old.erase("of");
  EXPECT_EQ(realization_file_from_json(old, "r.json").of, BudgetOf::Output);
  nlohmann::json bad = j;
  bad["of"] = "input";
  try {
    realization_file_from_json(bad, "r.json");
    FAIL() << "an unknown target was read";
  } catch (const io::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("key `of`: `input` is neither"), std::string::npos) << e.what();
  }
  // A wide accumulator names a narrowed site, and is f32 or f64.
  Assignment wide = a;
  wide.accumulators["loss.vjp[0]/%12"] = FloatType::F64;
  EXPECT_EQ(realization_file_from_json(realization_file_json("loss", wide, {}), "r.json").assignment.accumulators,
            wide.accumulators);
  nlohmann::json stray = realization_file_json("loss", wide, {});
  stray["decisions"]["accumulators"]["loss/%3"] = "f64";
  EXPECT_THROW(realization_file_from_json(stray, "r.json"), io::IoError);
  nlohmann::json newer = j;
  newer["version"] = 4;
  EXPECT_THROW(realization_file_from_json(newer, "r.json"), io::IoError);
}

}  // namespace
}  // namespace quire::precision
