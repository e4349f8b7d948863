#pragma once
// A small persistent pool of worker threads for the native backend.
//
// parallel_for splits independent tasks over the calling thread and up to
// threads − 1 pool workers. Tasks are claimed dynamically (a shared counter),
// so which thread runs a task is NOT determined: a caller that promises
// identical bits whatever the thread count (the products of gemm.h) gives each
// task disjoint outputs and a result that does not depend on who computed it.
//
// Between calls a worker first spins for a while (kSpin), watching for the
// next batch, and then sleeps on a condition variable; the caller likewise
// spins before it sleeps waiting for the workers. A training step makes a
// hundred calls a few tens of microseconds apart, and waking a sleeping thread
// (a futex, slower still in a virtual machine) cost more than many of their
// tasks. A task should still be worth at least tens of microseconds.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace quire::native {

/// Runs batches of independent tasks on persistent threads.
class WorkerPool {
 public:
  /// fn(task, slot): task ∈ [0, tasks); slot ∈ [0, threads) names the thread
  /// running it (0 is the caller) and is stable for one parallel_for call, so
  /// that tasks may index per-thread scratch with it.
  using TaskFn = std::function<void(int64_t task, int slot)>;

  /// Starts no thread: workers are created when a call first needs them.
  WorkerPool() = default;
  /// Stops and joins the workers (waits for nothing: no call can be running).
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Runs fn(task, slot) exactly once for every task in [0, tasks) on at most
  /// `threads` threads (the caller and threads − 1 workers; threads is clamped
  /// to [1, kMaxThreads]) and returns when all have finished. If a task
  /// throws, no further task is started and the first exception is rethrown
  /// here after the running ones end. A call from inside a task, or while
  /// another thread's call is running, waits for nothing: a nested call runs
  /// its tasks on the calling thread alone; a concurrent one waits its turn.
  void parallel_for(int64_t tasks, int threads, const TaskFn& fn);

  /// How many worker threads exist now (the caller is not counted).
  int worker_count() const;

  /// The process-wide pool the native kernels use.
  static WorkerPool& shared();

  /// A bound on `threads`: far above any machine quire runs on, it only
  /// guards against a nonsense request creating thousands of threads.
  static constexpr int kMaxThreads = 256;
  /// How long a worker watches for the next batch, and a caller for its
  /// workers, before sleeping.
  static constexpr std::chrono::microseconds kSpin{2000};

 private:
  struct Batch;
  void work_loop();
  void grow_to(int workers);  // requires call_mutex_ held
  static void run_tasks(Batch& batch, int slot);

  std::mutex call_mutex_;  // one parallel_for at a time (from outside tasks)
  mutable std::mutex state_mutex_;
  std::condition_variable wake_workers_;
  std::condition_variable batch_done_;
  std::vector<std::thread> workers_;
  Batch* batch_ = nullptr;       // the running batch, under state_mutex_
  // Both changed under state_mutex_; read without it while spinning.
  std::atomic<uint64_t> generation_{0};  // bumped for each batch
  std::atomic<int> workers_running_{0};  // workers that joined the current batch and have not left it
  bool stopping_ = false;
};

}  // namespace quire::native
