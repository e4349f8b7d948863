// The machine's two limits that bound a matrix product, measured, so that
// bench/gemm.cpp's figures can be read as fractions of them:
//   - f32 FMA peak: 16 independent chains of zmm fused multiply-adds per
//     thread, from registers (2 FLOP per lane and FMA);
//   - memory copy bandwidth: memcpy of a 256 MiB buffer into another, split
//     over the threads, counting bytes read plus bytes written.
// Each on 1 and 2 threads: the copy the median of --reps repetitions after
// one warm-up, the peak the calibration's own median of 5
// (calibrate/calibrate.h).
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

#include "bench_common.h"

namespace {

using quire::bench::Clock;
using quire::bench::median;
using quire::bench::seconds_since;
using quire::bench::timed_on_threads;

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
    std::printf("| %d | %.1f | %.1f |\n", threads, quire::bench::fma_peak_gflops(threads, 0.2), copy_gbytes_per_s(threads, reps));
  std::printf("\nmedian of %d repetitions after one warm-up; FMA: 16 independent zmm chains per thread; "
              "memcpy: one 256 MiB buffer into another, split over the threads\n",
              reps);
  return 0;
}
