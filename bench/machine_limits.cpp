// The machine's two limits that bound a matrix product, measured, so that
// bench/gemm.cpp's figures can be read as fractions of them:
//   - f32 FMA peak: 16 independent chains of zmm fused multiply-adds per
//     thread, from registers (2 FLOP per lane and FMA);
//   - memory copy bandwidth: memcpy of a 256 MiB buffer into another, split
//     over the threads, counting bytes read plus bytes written.
// Each on 1 and 2 threads, median of --reps repetitions after one warm-up.
//
//   build/bench/bench_machine_limits [--reps N]

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// 16 independent chains acc = acc·x + y, `iterations` times: 16·16·2 FLOP per
// iteration. The chains converge to y/(1 − x) and stay normal.
__attribute__((target("avx512f,fma"), noinline)) float fma_chains(int64_t iterations) {
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

double fma_peak_gflops(int threads, int reps) {
  const int64_t iterations = 100'000'000;  // ~0.2 s per thread at 4 GHz
  volatile float sink = 0;
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const double t = timed_on_threads(threads, [&](int) { sink = sink + fma_chains(iterations); });
    if (r > 0) rates.push_back(threads * static_cast<double>(iterations) * 16 * 16 * 2 / t / 1e9);
  }
  return median(rates);
}

double copy_gbytes_per_s(int threads, int reps) {
  const size_t bytes = size_t{256} << 20;
  char* src = static_cast<char*>(std::aligned_alloc(4096, bytes));
  char* dst = static_cast<char*>(std::aligned_alloc(4096, bytes));
  std::memset(src, 1, bytes);
  std::memset(dst, 2, bytes);
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const double t = timed_on_threads(threads, [&](int th) {
      const size_t begin = bytes / threads * th, end = th + 1 == threads ? bytes : bytes / threads * (th + 1);
      std::memcpy(dst + begin, src + begin, end - begin);
    });
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / t / 1e9);
  }
  std::free(src);
  std::free(dst);
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "bench_machine_limits: this CPU lacks AVX-512F or FMA\n");
    return 1;
  }
  std::printf("| threads | f32 FMA peak, GFLOP/s | memcpy, GB/s (read + written) |\n|---|---|---|\n");
  for (int threads : {1, 2})
    std::printf("| %d | %.1f | %.1f |\n", threads, fma_peak_gflops(threads, reps), copy_gbytes_per_s(threads, reps));
  std::printf("\nmedian of %d repetitions after one warm-up; FMA: 16 independent zmm chains per thread; "
              "memcpy: one 256 MiB buffer into another, split over the threads\n",
              reps);
  return 0;
}
