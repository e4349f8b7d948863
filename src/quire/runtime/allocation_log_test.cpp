// The allocation log (allocation_log.h) against RealStorage's allocations,
// one kind at a time: a block, a copy that shares it (no allocation), a write
// to a shared copy (an allocation), a view made beside another and dropped
// by a write, a window copied out; the peak and what was live at it; reports
// from several threads at once; only one log at a time.

#include "quire/runtime/allocation_log.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "quire/runtime/real_storage.h"

namespace quire::runtime {
namespace {

TEST(AllocationLog, CountsABlockUntilItsLastSharerGoes) {
  AllocationLog log;
  {
    RealStorage a(10, 1.0);
    EXPECT_EQ(log.live_bytes(), 80);
    RealStorage b = a;  // a reference count, not the elements
    EXPECT_EQ(log.live_bytes(), 80);
    EXPECT_EQ(log.allocations(), 1);
    a = RealStorage();
    EXPECT_EQ(log.live_bytes(), 80);  // b still holds the block
  }
  EXPECT_EQ(log.live_bytes(), 0);
  EXPECT_EQ(log.peak_bytes(), 80);
  EXPECT_EQ(log.releases(), 1);
}

TEST(AllocationLog, AWriteToASharedBlockCopiesIt) {
  AllocationLog log;
  RealStorage a(4, 2.0);
  RealStorage b = a;
  b.data()[0] = 3.0;  // b's own elements now
  EXPECT_EQ(log.live_bytes(), 64);
  EXPECT_EQ(log.allocations(), 2);
  EXPECT_EQ(a[0], 2.0);
}

TEST(AllocationLog, ViewsAreCountedAtTheirWidthsAndAWriteDropsTheOther) {
  AllocationLog log;
  RealStorage a(6, 0.5);
  EXPECT_EQ(log.live_bytes(), 48);
  std::as_const(a).narrow();  // the f32 view beside the f64 one
  EXPECT_EQ(log.live_bytes(), 48 + 24);
  const std::vector<LoggedAllocation> both = log.live_at_peak();
  EXPECT_EQ(both, (std::vector<LoggedAllocation>{{48, HeldAs::F64}, {24, HeldAs::F32}}));
  a.narrow_for_writing()[0] = 1.0f;  // the f64 view is stale: dropped
  EXPECT_EQ(log.live_bytes(), 24);
  EXPECT_EQ(log.peak_bytes(), 72);
  RealStorage f = RealStorage::narrow_for_overwrite(8);
  EXPECT_EQ(log.live_bytes(), 24 + 32);
  std::as_const(f).data();  // widened for a reader of f64
  EXPECT_EQ(log.live_bytes(), 24 + 32 + 64);
}

TEST(AllocationLog, AWindowSharesItsBlockUntilItNeedsItsOwnElements) {
  AllocationLog log;
  RealStorage whole(12, 0.25);
  RealStorage slice = RealStorage::window(whole, 4, 4);
  EXPECT_EQ(log.live_bytes(), 96);
  std::as_const(slice).narrow();  // an f32 view of its own elements only: copied out first
  EXPECT_EQ(log.live_bytes(), 96 + 32 + 16);
  EXPECT_EQ(log.allocations(), 3);
}

TEST(AllocationLog, WhatWasAllocatedBeforeItIsNotLiveInIt) {
  RealStorage before(100, 1.0);
  AllocationLog log;
  RealStorage after(5, 1.0);
  before = RealStorage();  // its release is ignored
  EXPECT_EQ(log.live_bytes(), 40);
  EXPECT_EQ(log.releases(), 0);
}

TEST(AllocationLog, ThePeakKeepsWhatWasLiveWhenItWasFirstReached) {
  AllocationLog log;
  RealStorage a(2), b(3), c(1);
  b = RealStorage();
  RealStorage d(4);  // 2 + 1 + 4 = 7 elements: above 6, a new peak
  d = RealStorage();
  RealStorage e(4);  // 7 again: not a new peak
  EXPECT_EQ(log.peak_bytes(), 56);
  EXPECT_EQ(log.live_at_peak(),
            (std::vector<LoggedAllocation>{{32, HeldAs::F64}, {16, HeldAs::F64}, {8, HeldAs::F64}}));
  e = RealStorage();
  log.reset_peak();
  EXPECT_EQ(log.peak_bytes(), 24);
}

TEST(AllocationLog, CountsReportsFromSeveralThreadsAtOnce) {
  AllocationLog log;
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([] {
      for (int r = 0; r < kRounds; ++r) {
        RealStorage s(static_cast<size_t>(1 + r % 7), 1.0);
        std::as_const(s).narrow();
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(log.live_bytes(), 0);
  EXPECT_EQ(log.allocations(), 2 * kThreads * kRounds);
  EXPECT_EQ(log.releases(), log.allocations());
  EXPECT_LE(log.peak_bytes(), kThreads * 7 * (8 + 4));
}

TEST(AllocationLog, IsOneAtATime) {
  AllocationLog log;
  EXPECT_THROW(AllocationLog second, std::logic_error);
  RealStorage s(1);
  EXPECT_EQ(log.allocations(), 1);  // still the first's
}

TEST(AllocationLog, SeesNothingOnceRemoved) {
  int64_t allocations = 0;
  {
    AllocationLog log;
    RealStorage s(3);
    allocations = log.allocations();
  }
  RealStorage unseen(3);
  AllocationLog later;
  EXPECT_EQ(allocations, 1);
  EXPECT_EQ(later.allocations(), 0);
  EXPECT_EQ(held_as_name(HeldAs::F32), std::string("f32"));
}

}  // namespace
}  // namespace quire::runtime
