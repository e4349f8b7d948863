#pragma once
// What the benchmarks share: a clock, the median of repeats, and the machine's
// f32 FMA peak, measured in the same process as the figures quoted against it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "quire/kernel/kernel_ir.h"
#include "quire/calibrate/calibrate.h"

namespace quire::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// The median wall time of `reps` runs of body(), after one run not counted.
template <typename Body>
double median_seconds(int reps, Body body) {
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto start = Clock::now();
    body();
    if (r > 0) times.push_back(seconds_since(start));
  }
  return median(times);
}

// Runs body(t) on `threads` threads at once; returns the wall time.
template <typename Body>
double timed_on_threads(int threads, Body body) {
  std::vector<std::thread> pool;
  const auto start = Clock::now();
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (std::thread& th : pool) th.join();
  return seconds_since(start);
}

// GFLOP/s of f32 fused multiply-adds from registers on `threads` threads:
// the calibration's own measurement (calibrate/calibrate.h), each thread
// running about `seconds`.
inline double fma_peak_gflops(int threads, double seconds) {
  return machine::peak_rate(runtime::FloatType::F32, threads, seconds) / 1e9;
}

// The loop of a one-loop element-wise kernel over n elements, its
// iterations independent (a split may share them out); `at` is element i.
struct ElementLoop {
  kernel::Stmt loop;
  kernel::Affine at;
};
inline ElementLoop element_loop(kernel::KernelBuilder& b, int64_t n) {
  ElementLoop e;
  e.loop.kind = kernel::StmtKind::Loop;
  e.loop.var = b.new_loop_var();
  e.loop.extent = n;
  e.loop.independent = true;
  e.at = kernel::Affine{0, {{e.loop.var, 1}}};
  return e;
}

}  // namespace quire::bench
