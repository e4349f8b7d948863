// Learning-rate schedules at their key steps (the first update, the last of
// the warmup, the first after it, the midpoint of the decay, the last update
// and past the end) against values worked out by hand from Hugging Face's
// definitions, and the reading of their source form.

#include "quire/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace quire::train {
namespace {

Schedule make(Schedule::Kind kind, int64_t warmup) {
  Schedule s;
  s.kind = kind;
  s.warmup = warmup;
  return s;
}

/// The schedule `text` reads as; a test failure if it reads as none.
Schedule parsed(const char* text) {
  std::string why;
  std::optional<Schedule> s = parse_schedule(text, &why);
  if (!s) ADD_FAILURE() << text << ": " << why;
  return s.value_or(Schedule{Schedule::Kind::Constant, -1});
}

TEST(ScheduleTest, ConstantIsOneEverywhere) {
  const Schedule s;
  for (int64_t step : {0, 1, 99, 100, 1000}) EXPECT_EQ(s.multiplier(step, 100), 1.0) << step;
  EXPECT_EQ(s.lr_at(0, 0.01, 100), 0.01);
}

TEST(ScheduleTest, ConstantWithWarmupRampsThenHolds) {
  const Schedule s = make(Schedule::Kind::Constant, 4);
  EXPECT_EQ(s.multiplier(0, 100), 0.0);  // the first update has learning rate 0
  EXPECT_EQ(s.multiplier(1, 100), 0.25);
  EXPECT_EQ(s.multiplier(3, 100), 0.75);  // warmup − 1
  EXPECT_EQ(s.multiplier(4, 100), 1.0);   // warmup: the first at the full rate
  EXPECT_EQ(s.multiplier(99, 100), 1.0);
}

TEST(ScheduleTest, LinearWarmupThenDecayToZeroAtTotal) {
  // W = 10, total = 110: the decay spans 100 updates.
  const Schedule s = make(Schedule::Kind::Linear, 10);
  EXPECT_EQ(s.multiplier(0, 110), 0.0);
  EXPECT_EQ(s.multiplier(9, 110), 0.9);     // 9 / 10
  EXPECT_EQ(s.multiplier(10, 110), 1.0);    // (110 − 10) / 100
  EXPECT_EQ(s.multiplier(60, 110), 0.5);    // the midpoint of the decay
  EXPECT_EQ(s.multiplier(109, 110), 0.01);  // the last update: 1 / 100
  EXPECT_EQ(s.multiplier(110, 110), 0.0);
  EXPECT_EQ(s.multiplier(500, 110), 0.0);  // clamped at 0 past the end
  EXPECT_EQ(s.lr_at(60, 0.02, 110), 0.01);
}

TEST(ScheduleTest, LinearWithoutWarmupStartsAtOne) {
  const Schedule s = make(Schedule::Kind::Linear, 0);
  EXPECT_EQ(s.multiplier(0, 4), 1.0);
  EXPECT_EQ(s.multiplier(1, 4), 0.75);
  EXPECT_EQ(s.multiplier(3, 4), 0.25);
}

TEST(ScheduleTest, CosineWarmupThenHalfCosine) {
  // W = 20, total = 120: progress = (step − 20) / 100.
  const Schedule s = make(Schedule::Kind::Cosine, 20);
  EXPECT_EQ(s.multiplier(0, 120), 0.0);
  EXPECT_EQ(s.multiplier(10, 120), 0.5);
  EXPECT_EQ(s.multiplier(19, 120), 0.95);  // 19 / 20
  EXPECT_EQ(s.multiplier(20, 120), 1.0);   // 0.5 · (1 + cos 0)
  // progress 1/4: 0.5 · (1 + cos(π/4)) = 1/2 + √2/4.
  EXPECT_DOUBLE_EQ(s.multiplier(45, 120), 0.5 + std::sqrt(2.0) / 4);
  EXPECT_EQ(s.multiplier(70, 120), 0.5);  // the midpoint: 1 + cos(π/2) rounds to 1
  // The last update, progress 0.99: 0.5 · (1 + cos(0.99π)) = sin²(π/200). The
  // f64 formula cancels: Python gives 0.0002467198171342 for it.
  EXPECT_DOUBLE_EQ(s.multiplier(119, 120), 0.0002467198171342);
  const double exact = std::pow(std::sin(std::numbers::pi / 200), 2);
  EXPECT_NEAR(s.multiplier(119, 120), exact, 1e-12 * exact);
  EXPECT_EQ(s.multiplier(120, 120), 0.0);
  // Past the end Hugging Face's cosine rises again: progress 1.5 → 0.5.
  EXPECT_DOUBLE_EQ(s.multiplier(170, 120), 0.5);
}

TEST(ScheduleTest, CosineWithoutWarmupStartsAtOne) {
  const Schedule s = make(Schedule::Kind::Cosine, 0);
  EXPECT_EQ(s.multiplier(0, 10), 1.0);
  EXPECT_EQ(s.lr_at(0, 3e-4, 10), 3e-4);
}

TEST(ScheduleTest, WarmupAtLeastTotalUsesASpanOfOne) {
  // max(1, total − W): a run no longer than its warmup never divides by zero.
  const Schedule s = make(Schedule::Kind::Linear, 10);
  EXPECT_EQ(s.multiplier(10, 5), 0.0);
  EXPECT_EQ(s.multiplier(4, 5), 0.4);
}

TEST(ScheduleTest, NegativeStepIsAnInternalError) { EXPECT_THROW(Schedule().multiplier(-1, 10), std::logic_error); }

TEST(ScheduleTest, ParsesTheFormsElaborationPrints) {
  EXPECT_EQ(parsed("cosine(warmup = 20)"), make(Schedule::Kind::Cosine, 20));
  EXPECT_EQ(parsed("linear(warmup = 0)"), make(Schedule::Kind::Linear, 0));
  EXPECT_EQ(parsed("linear"), make(Schedule::Kind::Linear, 0));
  EXPECT_EQ(parsed("constant"), Schedule());
  EXPECT_EQ(parsed("constant()"), Schedule());
  EXPECT_EQ(parsed("constant(warmup = 5)"), make(Schedule::Kind::Constant, 5));
  EXPECT_EQ(make(Schedule::Kind::Cosine, 20).to_string(), "cosine(warmup = 20)");
  EXPECT_EQ(Schedule().to_string(), "constant");
}

TEST(ScheduleTest, RefusesOtherForms) {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"exponential(gamma = 0.9)", "unknown schedule"},
      {"cosine(steps = 3)", "takes `warmup = W`"},
      {"cosine(20)", "takes `warmup = W`"},
      {"cosine(warmup = 2.5)", "natural number"},
      {"cosine(warmup = -1)", "natural number"},
      {"cosine(warmup = 1, cycles = 2)", "one argument"},
      {"cosine(warmup = 3", "not `cosine(warmup = W)`"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(parse_schedule(c.text, &why)) << c.text;
    EXPECT_NE(why.find(c.reason), std::string::npos) << c.text << ": " << why;
  }
}

}  // namespace
}  // namespace quire::train
