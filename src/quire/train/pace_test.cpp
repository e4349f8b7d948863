// The throughput and the time left come from recent steps: a slow first step
// (the compile) does not count once a second step has ended.

#include "quire/train/pace.h"

#include <gtest/gtest.h>

namespace quire::train {
namespace {

TEST(RecentPace, NothingBeforeTheFirstStep) {
  RecentPace pace;
  EXPECT_EQ(pace.seconds_per_step(), 0);
  EXPECT_EQ(pace.samples_per_s(32), 0);
  EXPECT_EQ(pace.seconds_left(100), 0);
}

TEST(RecentPace, TheFirstStepAloneIsItsOwnPace) {
  RecentPace pace;
  pace.step_done(6.0);
  EXPECT_DOUBLE_EQ(pace.seconds_per_step(), 6.0);
  EXPECT_DOUBLE_EQ(pace.seconds_left(10), 60.0);
}

TEST(RecentPace, ACompilingFirstStepDoesNotCountOnceAnotherEnds) {
  // A 6-second first step, then steps of 10 ms: the run's average would say
  // about 2 s a step (1:28 for 44 more); the recent pace says 10 ms.
  RecentPace pace(20);
  pace.step_done(6.0);
  pace.step_done(6.01);
  pace.step_done(6.02);
  EXPECT_NEAR(pace.seconds_per_step(), 0.01, 1e-12);
  EXPECT_NEAR(pace.seconds_left(44), 0.44, 1e-9);
  EXPECT_NEAR(pace.samples_per_s(16), 1600, 1e-6);
}

TEST(RecentPace, OnlyTheLastWindowOfStepsCounts) {
  RecentPace pace(4);
  double t = 0;
  for (int i = 0; i < 10; ++i) pace.step_done(t += 1.0);  // 1 s a step
  for (int i = 0; i < 4; ++i) pace.step_done(t += 0.5);   // then 0.5 s
  EXPECT_DOUBLE_EQ(pace.seconds_per_step(), 0.5);
  pace.step_done(t += 2.5);  // one slow step among the last four: (0.5·3 + 2.5) / 4
  EXPECT_DOUBLE_EQ(pace.seconds_per_step(), 1.0);
}

TEST(RecentPace, AWindowBelowOneCountsAsOne) {
  RecentPace pace(0);
  pace.step_done(1.0);
  pace.step_done(1.5);
  pace.step_done(3.5);
  EXPECT_DOUBLE_EQ(pace.seconds_per_step(), 2.0);
  EXPECT_EQ(pace.seconds_left(-3), 0);
}

}  // namespace
}  // namespace quire::train
