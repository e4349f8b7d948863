#include "quire/runtime/workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace quire::native {
namespace {

TEST(Workers, RunsEveryTaskExactlyOnceOnAnyThreadCount) {
  WorkerPool pool;
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> runs(1000);
    std::atomic<int> bad_slot{0};
    pool.parallel_for(1000, threads, [&](int64_t task, int slot) {
      runs[task].fetch_add(1);
      if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
    });
    for (const auto& r : runs) ASSERT_EQ(r.load(), 1) << threads << " threads";
    EXPECT_EQ(bad_slot.load(), 0);
  }
  // Workers are created on demand and kept: 8 threads needed 7 of them.
  EXPECT_EQ(pool.worker_count(), 7);
}

TEST(Workers, NoTasksCallsNothingAndOneTaskRunsOnTheCaller) {
  WorkerPool pool;
  pool.parallel_for(0, 4, [](int64_t, int) { FAIL() << "no task to run"; });
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  pool.parallel_for(1, 4, [&](int64_t, int) { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(pool.worker_count(), 0);
}

TEST(Workers, UsesMoreThanOneThreadWhenAsked) {
  WorkerPool pool;
  // Each task waits (bounded) until two distinct slots have started a task:
  // only possible if a worker really runs beside the caller.
  std::atomic<int> slot_seen[2] = {0, 0};
  pool.parallel_for(2, 2, [&](int64_t, int slot) {
    slot_seen[slot].store(1);
    for (int spin = 0; spin < 2'000'000 && slot_seen[0].load() + slot_seen[1].load() < 2; ++spin)
      std::this_thread::yield();
  });
  EXPECT_EQ(slot_seen[0].load() + slot_seen[1].load(), 2);
}

// A worker joins a batch both while it is still spinning after the last one
// (calls back to back) and after it has gone to sleep (a pause of several
// WorkerPool::kSpin): each call waits until a second slot has run a task.
TEST(Workers, AWorkerJoinsWhetherSpinningOrAsleep) {
  WorkerPool pool;
  auto two_slots_ran = [&] {
    std::atomic<int> slot_seen[2] = {0, 0};
    pool.parallel_for(2, 2, [&](int64_t, int slot) {
      slot_seen[slot].store(1);
      for (int spin = 0; spin < 2'000'000 && slot_seen[0].load() + slot_seen[1].load() < 2; ++spin)
        std::this_thread::yield();
    });
    return slot_seen[0].load() + slot_seen[1].load() == 2;
  };
  for (int call = 0; call < 20; ++call) EXPECT_TRUE(two_slots_ran()) << "back to back, call " << call;
  for (int call = 0; call < 3; ++call) {
    std::this_thread::sleep_for(5 * WorkerPool::kSpin);
    EXPECT_TRUE(two_slots_ran()) << "after a pause, call " << call;
  }
}

TEST(Workers, NestedCallRunsOnTheCallingThread) {
  WorkerPool pool;
  std::atomic<int> inner_runs{0};
  std::atomic<int> foreign_inner{0};
  pool.parallel_for(4, 2, [&](int64_t, int) {
    const std::thread::id outer = std::this_thread::get_id();
    pool.parallel_for(10, 2, [&](int64_t, int slot) {
      inner_runs.fetch_add(1);
      if (slot != 0 || std::this_thread::get_id() != outer) foreign_inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_runs.load(), 40);
  EXPECT_EQ(foreign_inner.load(), 0);
}

TEST(Workers, RethrowsATaskExceptionAndStaysUsable) {
  WorkerPool pool;
  std::atomic<int> started{0};
  std::atomic<bool> thrown{false};
  EXPECT_THROW(pool.parallel_for(10000, 2,
                                 [&](int64_t task, int) {
                                   started.fetch_add(1);
                                   if (task == 3) {
                                     thrown.store(true);
                                     throw std::runtime_error("task 3");
                                   }
                                   // The unwinding to the pool's catch can take
                                   // milliseconds (the first throw of a process,
                                   // a sanitizer): the other thread must not
                                   // finish every task meanwhile, so once the
                                   // throw began each task lasts a millisecond.
                                   if (thrown.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                 }),
               std::runtime_error);
  // No task starts after the throw is seen: far fewer than all ran.
  EXPECT_LT(started.load(), 10000);
  std::atomic<int> runs{0};
  pool.parallel_for(100, 2, [&](int64_t, int) { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 100);
}

TEST(Workers, ConcurrentCallersTakeTurns) {
  WorkerPool pool;
  std::atomic<int64_t> sum{0};
  auto caller = [&] {
    for (int round = 0; round < 50; ++round)
      pool.parallel_for(64, 2, [&](int64_t task, int) { sum.fetch_add(task); });
  };
  std::thread first(caller), second(caller);
  first.join();
  second.join();
  EXPECT_EQ(sum.load(), 2 * 50 * (63 * 64 / 2));
}

TEST(Workers, SharedPoolIsOnePool) { EXPECT_EQ(&WorkerPool::shared(), &WorkerPool::shared()); }

}  // namespace
}  // namespace quire::native
