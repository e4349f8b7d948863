// quire's products against OpenBLAS, in one process (bench/README.md):
//   - sgemm against OpenBLAS's cblas_sgemm on the same number of threads;
//   - bf16gemm against quire's own sgemm at the same shapes;
// at 1024³ and the transformer shapes 256×768×2304, 256×3072×768 and
// 256×768×50304 (m×k×n), on 1 and 2 threads. Every operand row-major, C
// overwritten. GFLOP/s count 2·m·n·k; each figure is the median of --reps
// timed runs after a warm-up, and is also given as a fraction of the f32 FMA
// peak measured here (bench/machine_limits.cpp's loop, same process).
//
// bf16gemm runs on the path it chooses (bf16gemm_path()) and, where that is
// not VDPBF16PS but the CPU has it, also on VDPBF16PS (Avx512Bf16).
//
// The sides run in turn, quire's in a rotating order and OpenBLAS last, then
// a pause: OpenBLAS's threads spin for a while after each call and would
// steal a core from the next side; after the pause a short spin wakes the
// cores again.
//
// quire's products run on the widest instruction set the CPU has under
// QUIRE_ISA's cap (runtime/isa.h): avx512, avx2 or baseline; the benchmark
// says which, and measures the FMA peak with that instruction set's vectors
// (zmm, ymm, or scalar chains). QUIRE_ISA=avx2 on an AVX-512 machine thus
// measures the AVX2 paths against OpenBLAS's AVX2 kernels and the ymm peak.
//
// OpenBLAS picks its kernels by the CPU model it detects; on a virtual
// machine's unnamed model it falls back to "Prescott" (SSE3, a few times
// slower). The benchmark therefore re-runs itself with OPENBLAS_CORETYPE set
// to the kernels of quire's instruction set (Cooperlake for avx512: AVX-512
// with BF16, OpenBLAS 0.3.21's newest Intel server core; Haswell for avx2,
// its AVX2+FMA kernels; Prescott for baseline) unless the variable is already
// set, --openblas-core names another, or --openblas-core detect.
//
// --shapes step times the training step's products instead (bench/train_step.py:
// 256×256×256, every operand of each of its three forms as it lies there:
// x·w, ct·wᵀ, xᵀ·ct), which "all" leaves out.
//
// --packed makes quire's sgemm pack every operand (OperandReads::Packed), as
// it did before it read small operands where they lie.
//
//   [QUIRE_ISA=avx512|avx2|baseline] build/bench/bench_gemm [--reps N] [--shapes all|square|transformer|step]
//                          [--threads 1,2] [--packed] [--openblas-core NAME|detect]

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bench_common.h"
#include "quire/runtime/gemm.h"
#include "quire/runtime/isa.h"
#include "quire/runtime/runtime_error.h"

namespace {

using quire::bench::Clock;
using quire::bench::median;
using quire::bench::seconds_since;
using quire::native::bf16_from_float;

struct Shape {
  int64_t m, k, n;
  const char* name;
  bool a_transposed = false;  ///< A stored as k × m, row-major (read transposed)
  bool b_transposed = false;  ///< B stored as n × k
};

struct Operands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
};

Operands make_operands(const Shape& s) {
  Operands ops;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  ops.a.resize(s.m * s.k);
  ops.b.resize(s.k * s.n);
  ops.c.assign(s.m * s.n, 0.0f);
  for (float& x : ops.a) x = unit(rng);
  for (float& x : ops.b) x = unit(rng);
  for (float x : ops.a) ops.a16.push_back(bf16_from_float(x));
  for (float x : ops.b) ops.b16.push_back(bf16_from_float(x));
  return ops;
}

// One timed call of each side, C = A·B, row-major (A or B read transposed
// where the shape says so).
void run_openblas(const Shape& s, Operands& o) {
  cblas_sgemm(CblasRowMajor, s.a_transposed ? CblasTrans : CblasNoTrans, s.b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, o.a.data(),
              static_cast<int>(s.a_transposed ? s.m : s.k), o.b.data(), static_cast<int>(s.b_transposed ? s.k : s.n),
              0.0f, o.c.data(), static_cast<int>(s.n));
}
quire::native::OperandReads sgemm_reads = quire::native::OperandReads::InPlaceWhereSmall;
void run_sgemm(const Shape& s, Operands& o, int threads) {
  const int64_t a_rs = s.a_transposed ? 1 : s.k, a_cs = s.a_transposed ? s.m : 1;
  const int64_t b_rs = s.b_transposed ? 1 : s.n, b_cs = s.b_transposed ? s.k : 1;
  quire::native::sgemm_on(quire::native::sgemm_path(), s.m, s.n, s.k, o.a.data(), a_rs, a_cs, o.b.data(), b_rs, b_cs,
                          o.c.data(), s.n, false, threads, sgemm_reads);
}
void run_bf16gemm(const Shape& s, Operands& o, int threads, quire::native::GemmPath path) {
  const int64_t a_rs = s.a_transposed ? 1 : s.k, a_cs = s.a_transposed ? s.m : 1;
  const int64_t b_rs = s.b_transposed ? 1 : s.n, b_cs = s.b_transposed ? s.k : 1;
  quire::native::bf16gemm_on(path, s.m, s.n, s.k, o.a16.data(), a_rs, a_cs, o.b16.data(), b_rs, b_cs, o.c.data(), s.n,
                             false, threads);
}

template <typename Run>
double time_once(Run run) {
  const auto start = Clock::now();
  run();
  return seconds_since(start);
}

// The largest relative difference between two f32 results (a sanity check
// that both sides computed the same product, not a test of bits).
double max_relative_difference(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0, scale = 0;
  for (float v : y) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  return worst / std::max(scale, 1e-30);
}

// After OpenBLAS: sleep while its threads spin down, then keep `threads`
// cores busy for ~40 ms so that whatever runs next does not start on cores
// (or virtual CPUs) that went idle during the sleep.
void pause_for_openblas_spinners(int threads) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  quire::bench::fma_peak_gflops(threads, 0.04);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  std::string which = "all", openblas_core;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--shapes" && i + 1 < argc) {
      which = argv[++i];
    } else if (arg == "--packed") {
      sgemm_reads = quire::native::OperandReads::Packed;
    } else if (arg == "--openblas-core" && i + 1 < argc) {
      openblas_core = argv[++i];
    } else if (arg == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        thread_counts.push_back(std::max(1, std::atoi(list.substr(0, comma).c_str())));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--shapes all|square|transformer|step] [--threads 1,2] [--packed] "
                   "[--openblas-core NAME|detect]\n",
                   argv[0]);
      return 2;
    }
  }
  using quire::runtime::Isa;
  Isa isa = Isa::Baseline;
  try {
    isa = quire::runtime::widest_isa();
  } catch (const quire::runtime::RuntimeError& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 2;
  }
  if (openblas_core.empty()) {
    switch (isa) {
      case Isa::Avx512: openblas_core = "Cooperlake"; break;
      case Isa::Avx2: openblas_core = "Haswell"; break;
      case Isa::Baseline: openblas_core = "Prescott"; break;
    }
  }
  // OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before main: set it
  // and start again.
  if (openblas_core != "detect" && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    setenv("OPENBLAS_CORETYPE", openblas_core.c_str(), 1);
    execv("/proc/self/exe", argv);
    std::perror("bench_gemm: re-running with OPENBLAS_CORETYPE set");
    return 1;
  }

  std::vector<Shape> shapes;
  if (which == "all" || which == "square") shapes.push_back({1024, 1024, 1024, "1024×1024×1024"});
  if (which == "all" || which == "transformer") {
    shapes.push_back({256, 768, 2304, "256×768×2304"});
    shapes.push_back({256, 3072, 768, "256×3072×768"});
    shapes.push_back({256, 768, 50304, "256×768×50304"});
  }
  if (which == "step") {
    shapes.push_back({256, 256, 256, "256³ x·w"});
    shapes.push_back({256, 256, 256, "256³ ct·wᵀ", false, true});
    shapes.push_back({256, 256, 256, "256³ xᵀ·ct", true, false});
  }

  using quire::native::GemmPath;
  const GemmPath bf16_path = quire::native::bf16gemm_path();
  // VDPBF16PS is AVX-512's: timed beside the chosen bf16 path only there.
  const bool vdpbf16ps_here = isa == Isa::Avx512 && quire::native::gemm_path_available(GemmPath::Avx512Bf16);
  const bool also_vdpbf16ps = bf16_path != GemmPath::Avx512Bf16 && vdpbf16ps_here;
  const char* const peak_loop = isa == Isa::Avx512 ? "16 zmm FMA chains per thread"
                                : isa == Isa::Avx2 ? "12 ymm FMA chains per thread"
                                                   : "16 scalar multiply-add chains per thread";
  std::printf("instruction set: %s (this CPU: %s; QUIRE_ISA=%s); FMA peak: %s\n", quire::runtime::isa_name(isa),
              quire::runtime::isa_name(quire::runtime::cpu_isa()),
              std::getenv("QUIRE_ISA") ? std::getenv("QUIRE_ISA") : "(unset)", peak_loop);
  std::printf("quire sgemm path: %s; bf16gemm path: %s%s; OpenBLAS: %s, core %s\n",
              quire::native::gemm_path_name(quire::native::sgemm_path()), quire::native::gemm_path_name(bf16_path),
              also_vdpbf16ps ? " (and avx512-bf16, VDPBF16PS, timed too)" : "", openblas_get_config(),
              openblas_get_corename());
  if (vdpbf16ps_here)
    std::printf("VDPBF16PS's FLOP rate over VFMADD231PS's on one core, measured now: %.2f\n",
                quire::native::gemm_detail::vdpbf16ps_relative_speed());
  std::printf("\n| shape m×k×n | threads | FMA peak GFLOP/s | OpenBLAS GFLOP/s | sgemm GFLOP/s | sgemm / OpenBLAS "
              "| bf16gemm GFLOP/s | bf16gemm / sgemm |%s fraction of peak: OpenBLAS, sgemm, bf16gemm%s "
              "| max rel. diff sgemm vs OpenBLAS |\n|---|---|---|---|---|---|---|---|%s---|---|\n",
              also_vdpbf16ps ? " VDPBF16PS GFLOP/s | VDPBF16PS / sgemm |" : "", also_vdpbf16ps ? ", VDPBF16PS" : "",
              also_vdpbf16ps ? "---|---|" : "");
  for (int threads : thread_counts) {
    const double peak = quire::bench::fma_peak_gflops(threads, 0.1);
    openblas_set_num_threads(threads);
    for (const Shape& s : shapes) {
      Operands ops = make_operands(s);
      const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
      // Warm-up: each side once (buffers, threads, page faults), and the check.
      run_openblas(s, ops);
      const std::vector<float> reference = ops.c;
      run_sgemm(s, ops, threads);
      const double difference = max_relative_difference(ops.c, reference);
      run_bf16gemm(s, ops, threads, bf16_path);
      if (also_vdpbf16ps) run_bf16gemm(s, ops, threads, GemmPath::Avx512Bf16);
      pause_for_openblas_spinners(threads);
      // quire's sides in turn, their order rotated each repetition; OpenBLAS
      // last, since its spinning threads would slow whatever followed it.
      std::vector<double> t_blas, t_sgemm, t_bf16, t_vdp;
      const int quire_sides = also_vdpbf16ps ? 3 : 2;
      for (int r = 0; r < reps; ++r) {
        for (int turn = 0; turn < quire_sides; ++turn) {
          switch ((turn + r) % quire_sides) {
            case 0: t_sgemm.push_back(time_once([&] { run_sgemm(s, ops, threads); })); break;
            case 1: t_bf16.push_back(time_once([&] { run_bf16gemm(s, ops, threads, bf16_path); })); break;
            case 2: t_vdp.push_back(time_once([&] { run_bf16gemm(s, ops, threads, GemmPath::Avx512Bf16); })); break;
          }
        }
        t_blas.push_back(time_once([&] { run_openblas(s, ops); }));
        pause_for_openblas_spinners(threads);
      }
      const double g_blas = flop / median(t_blas) / 1e9, g_sgemm = flop / median(t_sgemm) / 1e9,
                   g_bf16 = flop / median(t_bf16) / 1e9, g_vdp = also_vdpbf16ps ? flop / median(t_vdp) / 1e9 : 0;
      std::printf("| %s | %d | %.0f | %.1f | %.1f | %.2f | %.1f | %.2f |", s.name, threads, peak, g_blas, g_sgemm,
                  g_sgemm / g_blas, g_bf16, g_bf16 / g_sgemm);
      if (also_vdpbf16ps) std::printf(" %.1f | %.2f |", g_vdp, g_vdp / g_sgemm);
      std::printf(" %.2f, %.2f, %.2f", g_blas / peak, g_sgemm / peak, g_bf16 / peak);
      if (also_vdpbf16ps) std::printf(", %.2f", g_vdp / peak);
      std::printf(" | %.1e |\n", difference);
      std::fflush(stdout);
    }
  }
  std::printf("\nmedian of %d timed runs after one warm-up; each repetition runs quire's sides (sgemm, bf16gemm%s) "
              "in a rotating order, then OpenBLAS, then sleeps 0.3 s and spins the cores for ~40 ms\n",
              reps, also_vdpbf16ps ? " on both paths" : "");
  return 0;
}
