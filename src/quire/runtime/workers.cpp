#include "quire/runtime/workers.h"

#include <algorithm>
#include <atomic>

namespace quire::native {

namespace {
// True on a pool worker, and on a caller while it runs tasks: a parallel_for
// from such a thread runs serially, since waiting for the pool from inside one
// of its own tasks would deadlock.
thread_local bool tls_inside_task = false;

// Spins until done() or kSpin has passed; the clock is read every 64 polls.
template <typename Done>
void spin_until(Done done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int polls = 0;; ++polls) {
    if (done()) return;
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= until) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

/// One parallel_for call's shared state; lives on the caller's stack.
struct WorkerPool::Batch {
  const TaskFn* fn = nullptr;
  int64_t tasks = 0;
  int threads = 1;                 // participants at most, the caller included
  int joined = 0;                  // workers that joined (slots 1..joined), under state_mutex_
  std::atomic<int64_t> next_task{0};
  std::mutex error_mutex;
  std::exception_ptr first_error;  // under error_mutex
};

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = true;
  }
  wake_workers_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

WorkerPool& WorkerPool::shared() {
  static WorkerPool pool;
  return pool;
}

int WorkerPool::worker_count() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return static_cast<int>(workers_.size());
}

void WorkerPool::run_tasks(Batch& batch, int slot) {
  for (;;) {
    const int64_t task = batch.next_task.fetch_add(1, std::memory_order_relaxed);
    if (task >= batch.tasks) return;
    try {
      (*batch.fn)(task, slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(batch.error_mutex);
      if (!batch.first_error) batch.first_error = std::current_exception();
      // Start no further task anywhere; those running finish normally.
      batch.next_task.store(batch.tasks, std::memory_order_relaxed);
      return;
    }
  }
}

void WorkerPool::grow_to(int workers) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  while (static_cast<int>(workers_.size()) < workers) {
    workers_.emplace_back([this] { work_loop(); });
  }
}

void WorkerPool::work_loop() {
  tls_inside_task = true;
  uint64_t seen_generation = 0;
  for (;;) {
    Batch* batch = nullptr;
    int slot = 0;
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen_generation; }, kSpin);
    {
      std::unique_lock<std::mutex> lock(state_mutex_);
      wake_workers_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      // Join only a batch that is still open and short of threads: one whose
      // caller already finished every task has closed (batch_ is null), and
      // nobody waits for a worker that never joined.
      if (batch_ == nullptr || batch_->joined + 1 >= batch_->threads) continue;
      batch = batch_;
      slot = ++batch->joined;
      ++workers_running_;
    }
    run_tasks(*batch, slot);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      if (--workers_running_ == 0) batch_done_.notify_one();
    }
  }
}

void WorkerPool::parallel_for(int64_t tasks, int threads, const TaskFn& fn) {
  if (tasks <= 0) return;
  threads = std::clamp(threads, 1, kMaxThreads);
  if (threads > tasks) threads = static_cast<int>(tasks);
  if (threads == 1 || tls_inside_task) {
    for (int64_t task = 0; task < tasks; ++task) fn(task, 0);
    return;
  }

  std::lock_guard<std::mutex> call_lock(call_mutex_);
  grow_to(threads - 1);
  Batch batch;
  batch.fn = &fn;
  batch.tasks = tasks;
  batch.threads = threads;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    batch_ = &batch;
    ++generation_;
  }
  wake_workers_.notify_all();

  tls_inside_task = true;
  run_tasks(batch, 0);
  tls_inside_task = false;

  {
    // Close the batch (every task is claimed), then wait for the workers that
    // joined it; on a busy machine the others may not even have woken yet.
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      batch_ = nullptr;
    }
    // No worker joins a closed batch, so the count only falls.
    spin_until([&] { return workers_running_.load(std::memory_order_acquire) == 0; }, kSpin);
    std::unique_lock<std::mutex> lock(state_mutex_);
    batch_done_.wait(lock, [&] { return workers_running_ == 0; });
  }
  if (batch.first_error) std::rethrow_exception(batch.first_error);
}

}  // namespace quire::native
