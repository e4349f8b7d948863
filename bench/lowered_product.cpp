// A quire program's f32 product through the whole native path against
// OpenBLAS's cblas_sgemm on the same threads, in one process
// (bench/README.md):
//
//   fn f(x : ℝ[m: M, k: K], w : ℝ[k: K, n: N]) -> ℝ[m: M, n: N] = x · w
//
// realized under `--precision f32 --product-step fma`, lowered, planned
// under the shipped profile for the run's threads (a packed product at these
// shapes) and called through the interpreter's host walk, as `quire run`
// calls it: the entry's casts to f32, the operands gathered into f32, the
// packed product, the nest that stores its result. OpenBLAS multiplies the
// same values, already f32; the packed product's own kernel (native::sgemm)
// is timed alone on them too, so that the host's share of a call shows.
// GFLOP/s count 2·m·n·k; each figure is the median
// of --reps calls after a warm-up, and is also given as a fraction of the f32
// FMA peak measured here.
//
// OpenBLAS picks its kernels when it is loaded: set OPENBLAS_CORETYPE
// (Cooperlake, Haswell) in the environment to choose them; the core in use
// is printed.
//
//   bench_lowered_product [--reps N] [--threads 1,2]

#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quire/elab/elaborator.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/engine.h"
#include "quire/machine/profile.h"
#include "quire/runtime/gemm.h"
#include "quire/native/native_runner.h"

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
}

using namespace quire;

namespace {

struct Shape {
  int64_t m, k, n;
};

constexpr const char* kProgram = R"(dim M
dim K
dim N
fn f(x : ℝ[m: M, k: K], w : ℝ[k: K, n: N]) -> ℝ[m: M, n: N] = x · w
)";

runtime::Tensor random_f32(runtime::Shape shape, unsigned seed) {
  runtime::Tensor t = runtime::Tensor::real(std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (double& v : t.reals) v = u(rng);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (flag == "--threads") {
      thread_counts.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string t; std::getline(list, t, ',');) thread_counts.push_back(std::stoi(t));
    } else {
      fmt::print(stderr, "usage: bench_lowered_product [--reps N] [--threads 1,2]\n");
      return 2;
    }
  }
  DiagnosticSink diags;
  const elab::FileReader reader = [](const std::string&, std::string&) -> std::optional<std::string> {
    return std::string(kProgram);
  };
  const std::unique_ptr<elab::Program> program = elab::elaborate("product.qr", diags, reader);
  if (diags.has_errors()) {
    fmt::print(stderr, "{}", diags.render(program->sources));
    return 1;
  }
  const elab::Program& prog = *program;
  const int fn = prog.find_function("f");
  const machine::Profile profile = machine::shipped_profile();
  fmt::print("OpenBLAS core: {}\n", openblas_get_corename());
  fmt::print("{:<18} {:>7} {:>10} {:>8} {:>10} {:>8} {:>10} {:>8} {:>8} {:>8} {:>7}\n", "m×k×n", "threads",
             "quire call", "of peak", "its sgemm", "of peak", "OpenBLAS", "of peak", "call/OB", "sgemm/OB", "packed");
  const std::vector<Shape> shapes = {{1024, 1024, 1024}, {256, 768, 2304}, {256, 3072, 768}, {256, 768, 50304}};
  for (int threads : thread_counts) {
    const double peak = bench::fma_peak_gflops(threads, 0.05);
    openblas_set_num_threads(threads);
    for (const Shape& s : shapes) {
      const std::map<std::string, int64_t> dims = {{"M", s.m}, {"K", s.k}, {"N", s.n}};
      precision::RealizeOptions options;
      options.policy = precision::Policy::F32;
      options.fused_products = true;
      const precision::Realization r = precision::realize(prog, fn, options, dims);
      native::NativeRunner runner;
      runner.set_threads(threads);
      kernel::KernelEngine engine(prog, fn, dims, false, runner);
      engine.set_plan(profile, threads);
      interp::Interpreter interp(prog, dims, &r);
      interp.set_launcher(&engine);
      const runtime::Tensor x = random_f32({s.m, s.k}, 1), w = random_f32({s.k, s.n}, 2);
      const std::vector<interp::Value> args = {interp::Value::of(x), interp::Value::of(w)};
      (void)interp.call(fn, args);  // lowering, planning, compiling
      std::vector<double> quire_times;
      for (int i = 0; i < reps; ++i) {
        const auto start = bench::Clock::now();
        const interp::Value out = interp.call(fn, args);
        quire_times.push_back(bench::seconds_since(start));
      }

      std::vector<float> a(x.reals.begin(), x.reals.end()), b(w.reals.begin(), w.reals.end());
      std::vector<float> c(static_cast<size_t>(s.m * s.n));
      auto blas = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                    static_cast<int>(s.k), 1.0f, a.data(), static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0f,
                    c.data(), static_cast<int>(s.n));
      };
      blas();
      std::vector<double> blas_times;
      for (int i = 0; i < reps; ++i) {
        const auto start = bench::Clock::now();
        blas();
        blas_times.push_back(bench::seconds_since(start));
      }
      // The packed product alone (the sgemm the kernel runs), on the same f32 values.
      std::vector<double> sgemm_times;
      for (int i = 0; i <= reps; ++i) {
        const auto start = bench::Clock::now();
        native::sgemm(s.m, s.n, s.k, a.data(), s.k, 1, b.data(), s.n, 1, c.data(), s.n, false, threads);
        if (i > 0) sgemm_times.push_back(bench::seconds_since(start));
      }
      const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
      const double q = flops / bench::median(quire_times) / 1e9, o = flops / bench::median(blas_times) / 1e9;
      const double g = flops / bench::median(sgemm_times) / 1e9;
      fmt::print("{:<18} {:>7} {:>10.1f} {:>8.2f} {:>10.1f} {:>8.2f} {:>10.1f} {:>8.2f} {:>8.2f} {:>8.2f} {:>7}\n",
                 fmt::format("{}×{}×{}", s.m, s.k, s.n), threads, q, q / peak, g, g / peak, o, o / peak, q / o,
                 g / o, runner.packed_products() > 0 ? "yes" : "no");
    }
  }
  return 0;
}
