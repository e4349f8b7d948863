#pragma once
// What the benchmarks share: a clock, the median of repeats, and the machine's
// f32 FMA peak, measured in the same process as the figures quoted against it.

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

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

// 16 independent chains acc = acc·x + y, `iterations` times: 16·16·2 FLOP per
// iteration. The chains converge to y/(1 − x) and stay normal.
__attribute__((target("avx512f,fma"), noinline)) inline float fma_chains(int64_t iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  // (Not _mm512_reduce_add_ps: GCC 12 warns inside it under -Wall.)
  float lanes[16], sum = 0;
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_ps(lanes, acc[i]);
    for (float lane : lanes) sum += lane;
  }
  return sum;
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

// GFLOP/s of fma_chains on `threads` threads: the median of `reps` timed runs
// after one warm-up.
inline double fma_peak_gflops(int threads, int reps, int64_t iterations) {
  std::vector<float> sink(static_cast<size_t>(threads));
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const double t = timed_on_threads(threads, [&](int k) { sink[static_cast<size_t>(k)] = fma_chains(iterations); });
    if (r > 0) rates.push_back(threads * static_cast<double>(iterations) * 16 * 16 * 2 / t / 1e9);
  }
  return median(rates);
}

}  // namespace quire::bench
