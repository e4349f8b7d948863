// The machine's two limits that bound a matrix product, measured, so that
// bench/gemm.cpp's figures can be read as fractions of them:
//   - f32 FMA peak: independent chains of fused multiply-adds per thread, from
//     registers (2 FLOP per lane and FMA), in the widest vectors of the
//     instruction set quire runs under QUIRE_ISA's cap (runtime/isa.h): 16
//     zmm chains on avx512, 12 ymm chains on avx2 (16 registers), 16 scalar
//     chains on baseline;
//   - memory copy bandwidth: memcpy of a 256 MiB buffer into another, split
//     over the threads, counting bytes read plus bytes written.
// Each on 1 and 2 threads: the copy the median of --reps repetitions after
// one warm-up, the peak the calibration's own median of 5
// (calibrate/calibrate.h).
//
//   [QUIRE_ISA=avx512|avx2|baseline] build/bench/bench_machine_limits [--reps N]

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
#include "quire/runtime/isa.h"
#include "quire/runtime/runtime_error.h"

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
  using quire::runtime::Isa;
  Isa isa = Isa::Baseline;
  try {
    isa = quire::runtime::widest_isa();
  } catch (const quire::runtime::RuntimeError& e) {
    std::fprintf(stderr, "bench_machine_limits: %s\n", e.what());
    return 2;
  }
  const char* const peak_loop = isa == Isa::Avx512 ? "16 independent zmm chains per thread"
                                : isa == Isa::Avx2 ? "12 independent ymm chains per thread"
                                                   : "16 independent scalar chains per thread";
  std::printf("instruction set: %s (this CPU: %s; QUIRE_ISA=%s)\n\n", quire::runtime::isa_name(isa),
              quire::runtime::isa_name(quire::runtime::cpu_isa()),
              std::getenv("QUIRE_ISA") ? std::getenv("QUIRE_ISA") : "(unset)");
  std::printf("| threads | f32 FMA peak, GFLOP/s | memcpy, GB/s (read + written) |\n|---|---|---|\n");
  for (int threads : {1, 2})
    std::printf("| %d | %.1f | %.1f |\n", threads, quire::bench::fma_peak_gflops(threads, 0.2), copy_gbytes_per_s(threads, reps));
  std::printf("\nmedian of %d repetitions after one warm-up; FMA: %s; "
              "memcpy: one 256 MiB buffer into another, split over the threads\n",
              reps, peak_loop);
  return 0;
}
