// Dynamic loss scaling: GradScaler's defaults, unscaling and the detection
// of Inf/NaN, the back-off/growth sequence, and the state's round trip.

#include "quire/train/loss_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace quire::train {
namespace {

using interp::ParamMap;
using runtime::Tensor;

Tensor reals(runtime::Shape shape, std::vector<double> values) {
  Tensor t = Tensor::real(std::move(shape));
  t.reals = std::move(values);
  return t;
}

TEST(LossScaleTest, GradScalerDefaults) {
  const LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.config().growth_factor, 2.0);
  EXPECT_EQ(s.config().backoff_factor, 0.5);
  EXPECT_EQ(s.config().growth_interval, 2000);
}

TEST(LossScaleTest, UnscaleDividesByTheScale) {
  const LossScaler s;
  ParamMap grads{{"a", reals({2}, {65536.0, -3.0})}, {"b", reals({}, {1.0})}};
  EXPECT_TRUE(s.unscale(grads));
  EXPECT_EQ(grads["a"].reals, (std::vector<double>{1.0, -3.0 / 65536}));
  EXPECT_EQ(grads["b"].reals, (std::vector<double>{1.0 / 65536}));
}

TEST(LossScaleTest, UnscaleReportsInfAndNaN) {
  const LossScaler s;
  ParamMap inf{{"a", reals({2}, {1.0, std::numeric_limits<double>::infinity()})}};
  EXPECT_FALSE(s.unscale(inf));
  ParamMap nan{{"a", reals({1}, {1.0})}, {"b", reals({1}, {std::nan("")})}};
  EXPECT_FALSE(s.unscale(nan));
}

TEST(LossScaleTest, SkipBacksOffAndGrowthNeedsAnIntervalOfGoodSteps) {
  LossScaleConfig c;
  c.growth_interval = 3;
  LossScaler s(c);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(true);  // an Inf: back off, and the good steps start over
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);
  s.update(false);  // the third good step in a row
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(LossScaleTest, DefaultIntervalGrowsAfter2000GoodSteps) {
  LossScaler s;
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 1999);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaleTest, GrowthStopsShortOfInfinity) {
  // The scale is an f32: growing past 2^127 would overflow, so it stays.
  LossScaleConfig c;
  c.init_scale = 0x1p127;
  c.growth_interval = 1;
  LossScaler s(c);
  s.update(false);
  EXPECT_EQ(s.scale(), 0x1p127);
}

TEST(LossScaleTest, StateRoundTrip) {
  LossScaleConfig c;
  c.growth_interval = 10;
  LossScaler s(c);
  s.update(true);
  s.update(false);
  s.update(false);
  const nlohmann::json saved = nlohmann::json::parse(s.state_json().dump());
  EXPECT_EQ(saved["scale"], 32768.0);
  EXPECT_EQ(saved["_growth_tracker"], 2);
  LossScaler fresh;
  fresh.restore(saved);
  EXPECT_EQ(fresh.scale(), 32768.0);
  EXPECT_EQ(fresh.growth_tracker(), 2);
  EXPECT_EQ(fresh.config().growth_interval, 10);
  for (int i = 0; i < 8; ++i) {
    s.update(false);
    fresh.update(false);
  }
  EXPECT_EQ(fresh.scale(), 65536.0);
  EXPECT_EQ(fresh.state_json(), s.state_json());
}

TEST(LossScaleTest, RefusesBadSettingsAndState) {
  LossScaleConfig c;
  c.backoff_factor = 1.5;
  EXPECT_THROW(LossScaler{c}, LossScaleError);
  c = {};
  c.growth_interval = 0;
  EXPECT_THROW(LossScaler{c}, LossScaleError);
  LossScaler s;
  nlohmann::json state = s.state_json();
  state.erase("_growth_tracker");
  EXPECT_THROW(s.restore(state), LossScaleError);
  state = s.state_json();
  state["_growth_tracker"] = 2000;
  EXPECT_THROW(s.restore(state), LossScaleError);
  state = s.state_json();
  state["scale"] = "big";
  EXPECT_THROW(s.restore(state), LossScaleError);
  EXPECT_EQ(s.scale(), 65536.0);  // unchanged by the refusals
}

}  // namespace
}  // namespace quire::train
