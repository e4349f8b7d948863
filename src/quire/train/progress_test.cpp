// The progress line's exact text, and what Progress writes in each mode:
// which steps a plain log shows, and the escape sequences of the in-place line.

#include "quire/train/progress.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>

namespace quire::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Step 120 of 320 in the fourth of ten epochs.
StepRecord typical() {
  StepRecord r;
  r.step = 120;
  r.total_steps = 320;
  r.epoch = 3;
  r.epochs = 10;
  r.loss = 0.012345;
  r.lr = 0.0091;
  r.grad_norm = 0.4512;
  r.samples_per_s = 1234.4;
  r.elapsed_s = 12;
  r.eta_s = 3.2;
  return r;
}

/// Step `step` of `total`, in one epoch.
StepRecord at(int64_t step, int64_t total) {
  StepRecord r = typical();
  r.step = step;
  r.total_steps = total;
  r.epoch = 0;
  r.epochs = 1;
  return r;
}

TEST(ProgressTest, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(-0.0), "0:00");
  EXPECT_EQ(format_duration(7), "0:07");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(7.6), "0:08");
  EXPECT_EQ(format_duration(62), "1:02");
  EXPECT_EQ(format_duration(3599.4), "59:59");
  EXPECT_EQ(format_duration(3599.6), "1:00:00");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(100 * 3600 + 5), "100:00:05");
  EXPECT_GT(format_duration(1e300).size(), 290u);  // hours in full: no integer to overflow
  EXPECT_EQ(format_duration(-1), "--:--");
  EXPECT_EQ(format_duration(kNaN), "--:--");
  EXPECT_EQ(format_duration(kInf), "--:--");
}

TEST(ProgressTest, LineOfATypicalStep) {
  EXPECT_EQ(progress_line(typical()),
            "step 120/320  epoch 4/10  loss 1.2345e-02  lr 9.100e-03  |g| 4.5120e-01  1234 samples/s  0:03 left");
}

TEST(ProgressTest, LineOfAClippedF16Step) {
  StepRecord r = typical();
  r.grad_norm = 4.512;
  r.clipped = true;
  r.loss_scale = 65536;
  EXPECT_EQ(progress_line(r),
            "step 120/320  epoch 4/10  loss 1.2345e-02  lr 9.100e-03  |g| 4.5120e+00 (clipped)  scale 65536  "
            "1234 samples/s  0:03 left");
}

TEST(ProgressTest, LineOfASkippedStep) {
  StepRecord r = typical();
  r.loss = kInf;
  r.grad_norm = -kNaN;
  r.skipped = true;
  r.loss_scale = 32768;
  EXPECT_EQ(progress_line(r),
            "step 120/320  epoch 4/10  loss inf  skipped (scale 32768)  lr 9.100e-03  |g| nan  1234 samples/s  "
            "0:03 left");
}

TEST(ProgressTest, LineOfASlowFirstStep) {
  StepRecord r = typical();
  r.step = 1;
  r.epoch = 0;
  r.loss = -2.5;
  r.samples_per_s = 0.4567;
  r.eta_s = kInf;
  EXPECT_EQ(progress_line(r),
            "step 1/320  epoch 1/10  loss -2.5000e+00  lr 9.100e-03  |g| 4.5120e-01  0.46 samples/s  --:-- left");
  r.samples_per_s = 45.67;
  EXPECT_NE(progress_line(r).find("  45.7 samples/s  "), std::string::npos);
}

TEST(ProgressTest, DefaultLogEvery) {
  EXPECT_EQ(default_log_every(1), 1);
  EXPECT_EQ(default_log_every(100), 1);
  EXPECT_EQ(default_log_every(101), 3);
  EXPECT_EQ(default_log_every(150), 3);
  EXPECT_EQ(default_log_every(151), 4);
  EXPECT_EQ(default_log_every(5000), 100);
}

TEST(ProgressTest, PlainModePrintsFirstEveryNthLastAndSkippedSteps) {
  std::ostringstream out;
  std::string expected;
  {
    Progress progress(out, /*tty=*/false, /*every=*/3);
    for (int64_t s = 1; s <= 7; ++s) {
      StepRecord r = at(s, 7);
      r.skipped = s == 5;
      progress.step(r);
      if (s == 1 || s == 3 || s == 5 || s == 6 || s == 7) expected += progress_line(r) + "\n";
      if (s == 4) {
        progress.message("checkpoint written: ckpt/step-4");
        expected += "checkpoint written: ckpt/step-4\n";
      }
    }
    progress.finish();
  }
  EXPECT_EQ(out.str(), expected);
}

TEST(ProgressTest, PlainModeShowsTheFirstStepOfAResumedRun) {
  std::ostringstream out;
  Progress progress(out, false, 10);
  for (int64_t s = 13; s <= 21; ++s) progress.step(at(s, 40));
  EXPECT_EQ(out.str(), progress_line(at(13, 40)) + "\n" + progress_line(at(20, 40)) + "\n");
}

TEST(ProgressTest, PlainModeTreatsAnIntervalBelowOneAsOne) {
  std::ostringstream out;
  Progress progress(out, false, 0);
  progress.step(at(1, 3));
  progress.step(at(2, 3));
  EXPECT_EQ(out.str(), progress_line(at(1, 3)) + "\n" + progress_line(at(2, 3)) + "\n");
}

TEST(ProgressTest, TtyModeRedrawsInPlace) {
  std::ostringstream out;
  Progress progress(out, /*tty=*/true, /*every=*/100);
  const std::string one = progress_line(at(1, 3)), two = progress_line(at(2, 3));
  progress.step(at(1, 3));
  EXPECT_EQ(out.str(), "\r" + one + "\x1b[K");
  progress.step(at(2, 3));
  EXPECT_EQ(out.str(), "\r" + one + "\x1b[K\r" + two + "\x1b[K");
  progress.finish();
  progress.finish();  // idempotent
  EXPECT_EQ(out.str(), "\r" + one + "\x1b[K\r" + two + "\x1b[K\n");
}

TEST(ProgressTest, TtyMessageClearsAndRedrawsTheLine) {
  std::ostringstream out;
  Progress progress(out, true, 1);
  // Before any step there is no line to clear.
  progress.message("training 3 steps");
  const std::string line = progress_line(at(1, 3));
  progress.step(at(1, 3));
  progress.message("checkpoint written");
  EXPECT_EQ(out.str(), "training 3 steps\n\r" + line + "\x1b[K\r\x1b[Kcheckpoint written\n\r" + line + "\x1b[K");
  // After finish(), a message is a plain line, and a step starts a new in-place line.
  progress.finish();
  out.str("");
  progress.message("done");
  progress.step(at(2, 3));
  progress.finish();
  EXPECT_EQ(out.str(), "done\n\r" + progress_line(at(2, 3)) + "\x1b[K\n");
}

TEST(ProgressTest, DestructionEndsTheInPlaceLine) {
  std::ostringstream out;
  { Progress(out, true, 1).step(at(1, 3)); }
  EXPECT_EQ(out.str(), "\r" + progress_line(at(1, 3)) + "\x1b[K\n");
  std::ostringstream plain;
  { Progress(plain, false, 1).step(at(1, 3)); }
  EXPECT_EQ(plain.str(), progress_line(at(1, 3)) + "\n");
}

}  // namespace
}  // namespace quire::train
