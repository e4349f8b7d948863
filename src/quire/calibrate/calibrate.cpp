#include "quire/calibrate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QUIRE_CALIBRATE_X86 1
#endif

#include "quire/io/io_error.h"
#include "quire/runtime/gemm.h"
#include "quire/runtime/isa.h"
#include "quire/native/native_runner.h"
#include "quire/runtime/workers.h"

namespace quire::machine {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kernel::Affine;
using kernel::ElemType;
using kernel::Kernel;
using kernel::KernelBuilder;
using kernel::loop_stmt;
using kernel::set_stmt;
using kernel::Stmt;
using kernel::store_stmt;

namespace {

// ---------------------------------------------------------------------------
// sysfs

std::string read_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) throw io::IoError(file.string(), "cannot read");
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  return first == std::string::npos ? "" : line.substr(first, last - first + 1);
}

int64_t parse_count(const std::string& text, const fs::path& file, const char* what) {
  size_t used = 0;
  int64_t n = -1;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || n < 0)
    throw io::IoError(file.string(), fmt::format("expected {}, found `{}`", what, text));
  return n;
}

// sysfs writes sizes as "48K"; a bare number is bytes, and M and G are
// accepted for kernels that might one day use them.
int64_t parse_size(const std::string& text, const fs::path& file) {
  const char* what = "a size such as 48K";
  if (text.empty()) throw io::IoError(file.string(), fmt::format("expected {}, found nothing", what));
  int64_t scale = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': scale = int64_t{1} << 10; break;
    case 'M': scale = int64_t{1} << 20; break;
    case 'G': scale = int64_t{1} << 30; break;
    default: break;
  }
  if (scale != 1) digits.pop_back();
  const int64_t n = parse_count(digits, file, what);
  if (n == 0) throw io::IoError(file.string(), fmt::format("expected {}, found `{}`", what, text));
  return n * scale;
}

// "0-1,4,6-7" → 5.
int count_cpus(const std::string& list, const fs::path& file) {
  int count = 0;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    const std::string part = list.substr(at, comma - at);
    const size_t dash = part.find('-');
    const char* what = "a list of cpus such as 0-1,4";
    if (dash == std::string::npos) {
      parse_count(part, file, what);
      ++count;
    } else {
      const int64_t lo = parse_count(part.substr(0, dash), file, what);
      const int64_t hi = parse_count(part.substr(dash + 1), file, what);
      if (hi < lo) throw io::IoError(file.string(), fmt::format("expected {}, found `{}`", what, list));
      count += static_cast<int>(hi - lo + 1);
    }
    at = comma + 1;
  }
  return count;
}

// ---------------------------------------------------------------------------
// Timing

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

// Called through a volatile pointer so that no copy can be proven dead and
// dropped: the destination is never read.
void* (*volatile copy_bytes)(void*, const void*, size_t) = std::memcpy;

/// Bytes read plus written per second by memcpy from one buffer of `bytes`
/// to another, the copy split into `threads` parts over the worker pool:
/// the median of `runs` timings after a warm-up, each timing repeating the
/// copy until it lasts `min_seconds`.
double copy_bandwidth(size_t bytes, int threads, int runs, double min_seconds) {
  // Filled, so every page is mapped before anything is timed.
  std::vector<char> from(bytes, 1), to(bytes, 0);
  auto copy = [&] {
    if (threads == 1) {
      copy_bytes(to.data(), from.data(), bytes);
      return;
    }
    native::WorkerPool::shared().parallel_for(threads, threads, [&](int64_t part, int) {
      const size_t lo = bytes * static_cast<size_t>(part) / static_cast<size_t>(threads);
      const size_t hi = bytes * static_cast<size_t>(part + 1) / static_cast<size_t>(threads);
      copy_bytes(to.data() + lo, from.data() + lo, hi - lo);
    });
  };
  copy();
  const auto start = Clock::now();
  copy();
  const int64_t repeats = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_seconds / since(start))));
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    const auto t = Clock::now();
    for (int64_t i = 0; i < repeats; ++i) copy();
    rates.push_back(2.0 * static_cast<double>(bytes) * static_cast<double>(repeats) / since(t));
  }
  return median(rates);
}

// ---------------------------------------------------------------------------
// Peak rates: 16 independent chains of fused multiply-adds per thread, each
// waiting only on itself, so that the FMA units rather than their latency
// bound the loop. acc·a + b with a < 1 converges to b / (1 − a) = 1: the
// values stay normal (no subnormal slow path) and finite.

struct FmaLoop {
  double (*run)(int64_t iterations);  ///< returns the chains' sum, so that they are not dropped
  int flops_per_iteration;
};

#ifdef QUIRE_CALIBRATE_X86
__attribute__((target("avx512f"))) double fma_chains_f64_avx512(int64_t iterations) {
  __m512d acc[16];
  for (int c = 0; c < 16; ++c) acc[c] = _mm512_set1_pd(1.0 + c * 1e-3);
  const __m512d a = _mm512_set1_pd(0.999999), b = _mm512_set1_pd(1e-6);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_pd(acc[c], a, b);
  }
  // Stored and summed rather than _mm512_reduce_add_pd, whose GCC 12 header
  // trips -Wuninitialized.
  double lanes[8], sum = 0;
  for (int c = 0; c < 16; ++c) {
    _mm512_storeu_pd(lanes, acc[c]);
    for (double v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f"))) double fma_chains_f32_avx512(int64_t iterations) {
  __m512 acc[16];
  for (int c = 0; c < 16; ++c) acc[c] = _mm512_set1_ps(1.0f + static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  float lanes[16];
  double sum = 0;
  for (int c = 0; c < 16; ++c) {
    _mm512_storeu_ps(lanes, acc[c]);
    for (float v : lanes) sum += static_cast<double>(v);
  }
  return sum;
}

// AVX2 has 16 ymm registers: 12 chains and the two constants fit, and 12
// chains cover the FMA's latency (4–5 cycles) on its two units.
constexpr int kYmmChains = 12;

__attribute__((target("avx2,fma"))) double fma_chains_f64_avx2(int64_t iterations) {
  __m256d acc[kYmmChains];
  for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_set1_pd(1.0 + c * 1e-3);
  const __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-6);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_fmadd_pd(acc[c], a, b);
  }
  double lanes[4], sum = 0;
  for (int c = 0; c < kYmmChains; ++c) {
    _mm256_storeu_pd(lanes, acc[c]);
    for (double v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx2,fma"))) double fma_chains_f32_avx2(int64_t iterations) {
  __m256 acc[kYmmChains];
  for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_set1_ps(1.0f + static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  float lanes[8];
  double sum = 0;
  for (int c = 0; c < kYmmChains; ++c) {
    _mm256_storeu_ps(lanes, acc[c]);
    for (float v : lanes) sum += static_cast<double>(v);
  }
  return sum;
}
#endif

template <class T>
double multiply_add_chains(int64_t iterations) {
  T acc[16];
  for (int c = 0; c < 16; ++c) acc[c] = static_cast<T>(1.0 + c * 1e-3);
  const T a = static_cast<T>(0.999), b = static_cast<T>(1e-3);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = acc[c] * a + b;
  }
  double sum = 0;
  for (int c = 0; c < 16; ++c) sum += static_cast<double>(acc[c]);
  return sum;
}

// The widest vectors the instruction set allows under QUIRE_ISA's cap
// (runtime/isa.h): zmm, ymm, or scalar chains.
FmaLoop fma_loop(runtime::FloatType t) {
  const bool f64 = t == runtime::FloatType::F64;
  switch (runtime::widest_isa()) {
    case runtime::Isa::Avx512:
#ifdef QUIRE_CALIBRATE_X86
      return f64 ? FmaLoop{fma_chains_f64_avx512, 16 * 8 * 2} : FmaLoop{fma_chains_f32_avx512, 16 * 16 * 2};
#else
      [[fallthrough]];
#endif
    case runtime::Isa::Avx2:
#ifdef QUIRE_CALIBRATE_X86
      return f64 ? FmaLoop{fma_chains_f64_avx2, kYmmChains * 4 * 2} : FmaLoop{fma_chains_f32_avx2, kYmmChains * 8 * 2};
#else
      [[fallthrough]];
#endif
    // aarch64: the scalar chains, which the compiler leaves scalar; no
    // 128-bit NEON chains are measured yet, so the peak is a lower bound.
    case runtime::Isa::Neon:
    case runtime::Isa::Baseline: break;
  }
  return f64 ? FmaLoop{multiply_add_chains<double>, 16 * 2} : FmaLoop{multiply_add_chains<float>, 16 * 2};
}

volatile double fma_sink = 0;

}  // namespace

double peak_rate(runtime::FloatType t, int cores, double seconds) {
  const FmaLoop loop = fma_loop(t);
  int64_t iterations = 1 << 14;
  for (;;) {  // long enough to time, then scaled to `seconds`
    const auto start = Clock::now();
    fma_sink = fma_sink + loop.run(iterations);
    const double took = since(start);
    if (took > 1e-3) {
      iterations = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iterations) * seconds / took));
      break;
    }
    iterations *= 4;
  }
  std::vector<double> sums(static_cast<size_t>(cores));
  auto run_all = [&] {
    native::WorkerPool::shared().parallel_for(cores, cores, [&](int64_t task, int) {
      sums[static_cast<size_t>(task)] = loop.run(iterations);
    });
  };
  run_all();
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    const auto start = Clock::now();
    run_all();
    rates.push_back(static_cast<double>(cores) * static_cast<double>(iterations) * loop.flops_per_iteration /
                    since(start));
  }
  fma_sink = fma_sink + std::accumulate(sums.begin(), sums.end(), 0.0);
  return median(rates);
}

double packed_product_rate(int64_t n) {
  std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    b[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  }
  auto once = [&] {
    const auto start = Clock::now();
    native::sgemm(n, n, n, a.data(), n, 1, b.data(), n, 1, c.data(), n, false, 1);
    return since(start);
  };
  once();
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(once());
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median(runs);
}

namespace {

/// What a split launch pays over its work: each of `cores` parts spins for
/// a fixed time, so a call takes that time plus handing parts to the workers
/// and waiting for the last; the median of `calls` calls, after a warm-up.
/// Calls are spaced 50 µs apart, as a step's launches are: within the pool's
/// spin (WorkerPool::kSpin), so the workers are watching, not asleep. Empty
/// parts would measure nothing, since the caller claims them all first.
double measure_spawn(int cores, int calls) {
  if (cores < 2) return 0;
  native::WorkerPool& pool = native::WorkerPool::shared();
  constexpr double kPart = 20e-6;
  const native::WorkerPool::TaskFn spin = [](int64_t, int) {
    const auto start = Clock::now();
    while (since(start) < kPart) {
    }
  };
  for (int i = 0; i < 20; ++i) pool.parallel_for(cores, cores, spin);
  std::vector<double> times(static_cast<size_t>(calls));
  for (double& t : times) {
    static_assert(native::WorkerPool::kSpin > std::chrono::microseconds(50));
    const auto idle = Clock::now();
    while (since(idle) < 50e-6) {
    }
    const auto start = Clock::now();
    pool.parallel_for(cores, cores, spin);
    t = since(start);
  }
  return std::max(0.0, median(std::move(times)) - kPart);
}

// ---------------------------------------------------------------------------
// The calibration set

struct Chain {
  const char* family;
  int inputs;     ///< 1 or 2
  int ops;        ///< floating-point operations per element
  bool with_exp;  ///< one of them an exp (a libm call the vectorizer cannot widen)
};

// out[i, j] = a chain of `ops` operations on x[i, j] (and y[i, j]): both
// loops independent, the outer split, the inner given lanes. Each input is
// loaded once and the rest are constants, so that nest_facts counts exactly
// the accesses the C code makes. v·0.75 + 0.25 pulls v towards 1, so every
// value stays finite and normal whatever the chain's length.
Kernel chain_kernel(const Chain& c, int64_t rows, int64_t cols) {
  KernelBuilder b(fmt::format("calibrate {} [{}, {}]", c.family, rows, cols));
  const runtime::Shape shape = {rows, cols};
  const int x = b.buffer(ElemType::F64, shape);
  const int y = c.inputs == 2 ? b.buffer(ElemType::F64, shape) : -1;
  const int out = b.buffer(ElemType::F64, shape);
  const int i = b.new_loop_var(), j = b.new_loop_var();
  const Affine at{0, {{i, cols}, {j, 1}}};
  int v = b.load(x, at);
  int done = 0;
  if (y >= 0) {
    v = b.binary(runtime::BinaryOp::Add, v, b.load(y, at));
    ++done;
  }
  for (; done < c.ops; ++done) {
    if (c.with_exp && done == c.ops / 2)
      v = b.unary(runtime::UnaryOp::Exp, v);
    else if (done % 2 == 0)
      v = b.binary(runtime::BinaryOp::Mul, v, b.constant(0.75));
    else
      v = b.binary(runtime::BinaryOp::Add, v, b.constant(0.25));
  }
  b.kernel().body.push_back(loop_stmt(i, rows, {loop_stmt(j, cols, {store_stmt(out, at, v)}, true)}, true));
  return b.take();
}

// out[i] = Σ_j x[i, j], in j's order: the outer loop independent (split and
// lanes), the inner a fold.
Kernel row_sum_kernel(int64_t rows, int64_t cols) {
  KernelBuilder b(fmt::format("calibrate rowsum [{}, {}]", rows, cols));
  const int x = b.buffer(ElemType::F64, {rows, cols});
  const int out = b.buffer(ElemType::F64, {rows});
  const int i = b.new_loop_var(), j = b.new_loop_var();
  const int s = b.new_scalar();
  const int add = b.binary(runtime::BinaryOp::Add, b.scalar(s), b.load(x, Affine{0, {{i, cols}, {j, 1}}}));
  b.kernel().body.push_back(loop_stmt(i, rows,
                                      {set_stmt(s, b.constant(0.0)), loop_stmt(j, cols, {set_stmt(s, add)}),
                                       store_stmt(out, Affine{0, {{i, 1}}}, b.scalar(s))},
                                      true));
  return b.take();
}

constexpr Chain kAdd{"add", 2, 1, false};
constexpr Chain kChain4{"chain4", 1, 4, false};
constexpr Chain kChain16{"chain16", 2, 16, false};
constexpr Chain kExp16{"exp16", 1, 16, true};

CalibrationNest chain_nest(const Chain& c, int64_t rows, int64_t cols) {
  return {fmt::format("{} [{}, {}]", c.family, rows, cols), chain_kernel(c, rows, cols)};
}
CalibrationNest row_sum_nest(int64_t rows, int64_t cols) {
  return {fmt::format("rowsum [{}, {}]", rows, cols), row_sum_kernel(rows, cols)};
}

// ---------------------------------------------------------------------------
// Timing the set

/// The median launch of `k`, after a warm-up (which also compiles it): as
/// many launches as give 10 ms in all, and at least 3.
double time_launch(native::NativeRunner& runner, int id, const Kernel& k,
                   const std::vector<const runtime::Tensor*>& inputs) {
  constexpr double kMinTotal = 10e-3;
  // Bounds the launches of a tiny kernel; 10 ms is reached long before it
  // on anything above a microsecond a launch.
  constexpr size_t kMaxLaunches = 20000;
  runner.run(id, k, inputs);
  std::vector<double> times;
  double total = 0;
  while (times.size() < 3 || (total < kMinTotal && times.size() < kMaxLaunches)) {
    const auto start = Clock::now();
    runtime::Tensor out = runner.run(id, k, inputs);
    const double took = since(start);
    times.push_back(took);
    total += took;
  }
  return median(std::move(times));
}

std::vector<CalibrationSample> time_nests(const std::vector<CalibrationNest>& nests, const Profile& provisional,
                                          const std::function<void(const std::string&)>& say) {
  native::NativeRunner runner;
  runner.set_threads(provisional.cores);
  std::vector<CalibrationSample> samples;
  int id = 0;
  if (say) say(fmt::format("compiling and timing {} nests at every layout", nests.size()));
  for (const CalibrationNest& nest : nests) {
    const kernel::NestFacts facts = kernel::nest_facts(nest.kernel);
    std::vector<runtime::Tensor> held;
    for (int b = 0; b < nest.kernel.output(); ++b)
      held.push_back(runtime::Tensor::real(nest.kernel.buffers[static_cast<size_t>(b)].shape, 0.5 + 0.25 * b));
    std::vector<const runtime::Tensor*> inputs;
    for (const runtime::Tensor& t : held) inputs.push_back(&t);
    for (const kernel::Layout& l : kernel::layout_space(facts, provisional)) {
      Kernel k = nest.kernel;
      kernel::apply_layout(k, l);
      samples.push_back(CalibrationSample{nest.name, facts, l, time_launch(runner, id++, k, inputs)});
    }
  }
  return samples;
}

// ---------------------------------------------------------------------------
// The fit

/// Nelder–Mead from `x0` with a first simplex of `step` along each axis,
/// restarted from its best point until a restart no longer improves it.
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                double step) {
  const size_t n = x0.size();
  constexpr int kMaxEvaluations = 20000;
  constexpr int kMaxRestarts = 30;
  constexpr double kSimplexSize = 1e-11;  // in the logs: far below what any constant needs
  std::vector<double> best = x0;
  double best_value = f(best);
  for (int restart = 0; restart < kMaxRestarts; ++restart) {
    std::vector<std::vector<double>> points(n + 1, best);
    std::vector<double> values(n + 1, best_value);
    for (size_t d = 0; d < n; ++d) {
      points[d + 1][d] += step;
      values[d + 1] = f(points[d + 1]);
    }
    std::vector<size_t> order(n + 1);
    for (int evaluations = 0; evaluations < kMaxEvaluations;) {
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
      const size_t lo = order[0], hi = order[n], next = order[n - 1];
      double size = 0;
      for (size_t p = 0; p <= n; ++p)
        for (size_t d = 0; d < n; ++d) size = std::max(size, std::abs(points[p][d] - points[lo][d]));
      if (size < kSimplexSize) break;
      std::vector<double> centroid(n, 0.0);
      for (size_t p = 0; p <= n; ++p)
        if (p != hi)
          for (size_t d = 0; d < n; ++d) centroid[d] += points[p][d] / static_cast<double>(n);
      auto along = [&](double t) {
        std::vector<double> x(n);
        for (size_t d = 0; d < n; ++d) x[d] = centroid[d] + t * (points[hi][d] - centroid[d]);
        return x;
      };
      const std::vector<double> reflected = along(-1);
      const double fr = f(reflected);
      ++evaluations;
      if (fr < values[lo]) {
        const std::vector<double> expanded = along(-2);
        const double fe = f(expanded);
        ++evaluations;
        if (fe < fr) {
          points[hi] = expanded;
          values[hi] = fe;
        } else {
          points[hi] = reflected;
          values[hi] = fr;
        }
        continue;
      }
      if (fr < values[next]) {
        points[hi] = reflected;
        values[hi] = fr;
        continue;
      }
      const bool outside = fr < values[hi];
      const std::vector<double> contracted = along(outside ? -0.5 : 0.5);
      const double fc = f(contracted);
      ++evaluations;
      if (fc < (outside ? fr : values[hi])) {
        points[hi] = contracted;
        values[hi] = fc;
        continue;
      }
      for (size_t p = 0; p <= n; ++p) {
        if (p == lo) continue;
        for (size_t d = 0; d < n; ++d) points[p][d] = points[lo][d] + 0.5 * (points[p][d] - points[lo][d]);
        values[p] = f(points[p]);
        ++evaluations;
      }
    }
    const size_t lo = static_cast<size_t>(std::min_element(values.begin(), values.end()) - values.begin());
    const bool improved = values[lo] < best_value * (1 - 1e-12) && best_value - values[lo] > 1e-300;
    if (values[lo] < best_value) {
      best = points[lo];
      best_value = values[lo];
    }
    if (!improved) break;
    step = std::max(step * 0.5, 1e-3);
  }
  return best;
}

// The fit's coordinates: the logs of the positive constants, and p through a
// logistic map onto (1, 3), so that every point Nelder–Mead visits is a model.
constexpr double kPLow = 1, kPHigh = 3;

std::vector<double> model_coordinates(const LayoutModel& m) {
  const double t = std::clamp((m.p - kPLow) / (kPHigh - kPLow), 1e-9, 1 - 1e-9);
  return {std::log(m.launch_seconds), std::log(m.op_seconds), std::log(m.load_seconds), std::log(m.lane_speedup),
          std::log(t / (1 - t)),         std::log(m.call_seconds), std::log(m.fresh_seconds)};
}

std::string bytes_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (int64_t{1} << 10) && bytes % (int64_t{1} << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

}  // namespace

Caches read_caches(const std::string& cache_dir) {
  std::error_code ec;
  if (!fs::is_directory(cache_dir, ec))
    throw io::IoError(cache_dir, "missing: the cache sizes are read from sysfs, which this system does not provide");
  std::vector<fs::path> indices;
  for (const fs::directory_entry& e : fs::directory_iterator(cache_dir, ec))
    if (e.path().filename().string().rfind("index", 0) == 0) indices.push_back(e.path());
  std::sort(indices.begin(), indices.end());
  Caches c;
  bool have_l1 = false;
  for (const fs::path& dir : indices) {
    if (read_line(dir / "type") == "Instruction") continue;
    const int64_t level = parse_count(read_line(dir / "level"), dir / "level", "a cache level");
    const int64_t size = parse_size(read_line(dir / "size"), dir / "size");
    if (level == 1) {
      c.l1 = size;
      c.line = static_cast<int>(
          parse_count(read_line(dir / "coherency_line_size"), dir / "coherency_line_size", "a line size in bytes"));
      have_l1 = true;
    } else if (level == 2) {
      c.l2 = size;
    } else if (level == 3) {
      c.l3 = size;
      c.l3_shared_by = count_cpus(read_line(dir / "shared_cpu_list"), dir / "shared_cpu_list");
    }
  }
  if (!have_l1) throw io::IoError(cache_dir, "no level 1 data cache is described");
  if (c.l2 == 0) throw io::IoError(cache_dir, "no level 2 cache is described");
  if (c.line <= 0) throw io::IoError(cache_dir, "a cache line of 0 bytes");
  // Without an L3 the model's L3 band is empty: whatever outgrows L2 is
  // priced at memory's bandwidth.
  if (c.l3 == 0) c.l3 = c.l2;
  return c;
}

int host_vector_bytes() {
  // Under QUIRE_ISA's cap, the cap's vectors (the C compiler's flags follow
  // it too: native/c_compiler.cpp).
  if (runtime::widest_isa() < runtime::cpu_isa()) return runtime::widest_isa() == runtime::Isa::Avx2 ? 32 : 16;
#ifdef QUIRE_CALIBRATE_X86
  if (__builtin_cpu_supports("avx512f")) return 64;
  if (__builtin_cpu_supports("avx2")) return 32;
#endif
  return 16;
}

std::vector<CalibrationNest> calibration_nests(bool quick) {
  std::vector<CalibrationNest> nests;
  if (quick) {
    nests.push_back(chain_nest(kAdd, 32, 32));
    nests.push_back(chain_nest(kChain4, 256, 256));
    nests.push_back(chain_nest(kExp16, 64, 64));
    nests.push_back(row_sum_nest(64, 64));
    return nests;
  }
  // 2^8 … 2^22 elements, as square as a power of two allows.
  for (int log2 : {8, 11, 14, 17, 20, 22}) {
    const int64_t rows = int64_t{1} << (log2 - log2 / 2), cols = int64_t{1} << (log2 / 2);
    for (const Chain& c : {kAdd, kChain4, kChain16, kExp16}) nests.push_back(chain_nest(c, rows, cols));
    nests.push_back(row_sum_nest(rows, cols));
  }
  // Beyond any L3 a machine is likely to report, so that the memory band has
  // points: 384 MiB, 512 MiB and 512 MiB of buffers.
  nests.push_back(chain_nest(kAdd, 4096, 4096));
  nests.push_back(chain_nest(kChain4, 8192, 4096));
  nests.push_back(row_sum_nest(8192, 8192));
  // Shapes at the edges of the space: one row (no split), and four columns
  // (too few for the lanes, which move out to the rows).
  nests.push_back(chain_nest(kAdd, 1, 65536));
  nests.push_back(chain_nest(kChain4, 16384, 4));
  return nests;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("spearman: the two sides differ in length");
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < order.size();) {
      size_t j = i;
      while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
      const double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
      for (size_t k = i; k <= j; ++k) r[order[k]] = mean_rank;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n;
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (va == 0 || vb == 0) return 0;
  return cov / std::sqrt(va * vb);
}

namespace {

// exp of a log the fit's search walks, held within ±35: a constant no sample
// is bound by lets the search walk its log towards −∞ (the quick calibration
// once wrote op_seconds 0). e^−35 ≈ 6·10⁻¹⁶ s is below a femtosecond an
// operation, far beyond any fitted value.
double bounded_exp(double v) { return std::exp(std::clamp(v, -35.0, 35.0)); }

// The fit's objective: the squared log error of p's predictions against the
// samples' times (`logs`: their logs); the largest double where it is not finite.
double squared_log_error(const std::vector<CalibrationSample>& samples, const std::vector<double>& logs,
                         const Profile& p) {
  double sum = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double r = std::log(kernel::predict(samples[i].facts, samples[i].layout, p).total) - logs[i];
    sum += r * r;
  }
  return std::isfinite(sum) ? sum : std::numeric_limits<double>::max();
}

std::vector<double> logs_of_times(const std::vector<CalibrationSample>& samples) {
  std::vector<double> logs;
  for (const CalibrationSample& s : samples) logs.push_back(std::log(s.seconds));
  return logs;
}

// p's model with its error, rank correlation and points on `samples` filled.
LayoutModel with_fit_measures(const std::vector<CalibrationSample>& samples, const Profile& p) {
  LayoutModel m = *p.layout;
  std::vector<double> predicted, seconds;
  double error = 0;
  for (const CalibrationSample& s : samples) {
    predicted.push_back(kernel::predict(s.facts, s.layout, p).total);
    seconds.push_back(s.seconds);
    error += std::abs(predicted.back() / s.seconds - 1);
  }
  m.error = error / static_cast<double>(samples.size());
  m.rank_correlation = spearman(predicted, seconds);
  m.points = static_cast<int>(samples.size());
  return m;
}

}  // namespace

LayoutModel fit_layout_model(const std::vector<CalibrationSample>& samples, const Profile& measured) {
  if (samples.empty()) throw std::invalid_argument("fit_layout_model: no samples");
  if (!measured.layout) throw std::invalid_argument("fit_layout_model: the profile carries no spawn_seconds");
  Profile p = measured;
  LayoutModel& m = *p.layout;
  const std::vector<double> logs_measured = logs_of_times(samples);
  auto loss = [&](const std::vector<double>& x) {
    m = layout_model_at(m, x);
    return squared_log_error(samples, logs_measured, p);
  };
  // Starting points: the fastest launch bounds λ, and a scalar operation is
  // guessed at a few lanes' worth of the measured peak on one core. Several
  // starts guard against a local minimum of the p-norm's valley.
  const double fastest = std::min_element(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
                           return a.seconds < b.seconds;
                         })->seconds;
  const auto f64 = measured.peak_flops.find(runtime::FloatType::F64);
  const double per_core = f64 != measured.peak_flops.end() ? f64->second / measured.cores : 1e10;
  const double lanes = std::max(1, measured.vector_bytes / 8);
  std::vector<double> best;
  double best_loss = std::numeric_limits<double>::infinity();
  for (double start_p : {1.3, 2.0})
    for (double start_lane : {1.5, lanes / 2 + 0.5}) {
      LayoutModel start = m;
      start.launch_seconds = fastest / 2;
      start.op_seconds = 2 * lanes / per_core;
      start.load_seconds = start.op_seconds;
      start.lane_speedup = start_lane;
      start.p = start_p;
      // A library call as some dozens of operations; a fresh byte at the
      // speed of writing memory once.
      start.call_seconds = 20 * start.op_seconds;
      start.fresh_seconds = 1 / measured.memory_bandwidth;
      const std::vector<double> x = nelder_mead(loss, model_coordinates(start), 1.0);
      const double l = loss(x);
      if (l < best_loss) {
        best_loss = l;
        best = x;
      }
    }
  m = layout_model_at(m, best);
  return with_fit_measures(samples, p);
}

LayoutModel fit_layout_scale(const std::vector<CalibrationSample>& samples, const Profile& measured,
                             const LayoutModel& anchor) {
  if (samples.empty()) throw std::invalid_argument("fit_layout_scale: no samples");
  if (!measured.layout) throw std::invalid_argument("fit_layout_scale: the profile carries no spawn_seconds");
  Profile p = measured;
  LayoutModel& m = *p.layout;
  m.lane_speedup = anchor.lane_speedup;
  m.p = anchor.p;
  // x: the logs of λ and of s, each within ±35 as layout_model_at holds them.
  auto at = [&](const std::vector<double>& x) {
    const double scale = bounded_exp(x.at(1));
    m.launch_seconds = bounded_exp(x.at(0));
    m.op_seconds = anchor.op_seconds * scale;
    m.load_seconds = anchor.load_seconds * scale;
    m.call_seconds = anchor.call_seconds * scale;
    m.fresh_seconds = anchor.fresh_seconds * scale;
  };
  const std::vector<double> logs_measured = logs_of_times(samples);
  auto loss = [&](const std::vector<double>& x) {
    at(x);
    return squared_log_error(samples, logs_measured, p);
  };
  const std::vector<double> x = nelder_mead(loss, {std::log(anchor.launch_seconds), 0.0}, 1.0);
  at(x);
  return with_fit_measures(samples, p);
}

Calibration calibrate(const CalibrationOptions& o) {
  auto say = [&](const std::string& what) {
    if (o.progress) o.progress(what);
  };
  Calibration c;
  Profile& p = c.profile;
  p.name = o.name;
  p.cores = std::max(1u, std::thread::hardware_concurrency());
  p.caches = read_caches(o.cache_dir);
  p.vector_bytes = host_vector_bytes();

  // The kernels first: they need the compiler, and a missing one should
  // stop the calibration before the long measurements.
  const std::vector<CalibrationNest> nests = calibration_nests(o.quick);
  c.samples = time_nests(nests, p, o.progress);

  LayoutModel model;
  say("measuring the pool's spawn");
  model.spawn_seconds = measure_spawn(p.cores, o.quick ? 500 : 2000);
  say("measuring bandwidths");
  p.memory_bandwidth = copy_bandwidth(size_t{256} << 20, p.cores, 5, 0);
  // The pair of buffers fills half of L2, so that both stay in it.
  p.l2_bandwidth = copy_bandwidth(static_cast<size_t>(p.caches.l2 / 4), 1, 7, o.quick ? 2e-3 : 10e-3);
  // A quarter of L3 at most, so that it is not evicted by others sharing
  // it, and no more than 32 MiB, since some virtual machines report an L3
  // far larger than the cache any one core can hold.
  const int64_t l3_pair = std::min<int64_t>(p.caches.l3 / 4, int64_t{32} << 20);
  p.l3_bandwidth = copy_bandwidth(static_cast<size_t>(l3_pair / 2), 1, 7, o.quick ? 2e-3 : 10e-3);
  say("measuring peak rates");
  const double seconds = o.quick ? 5e-3 : 20e-3;
  p.peak_flops[runtime::FloatType::F64] = peak_rate(runtime::FloatType::F64, p.cores, seconds);
  p.peak_flops[runtime::FloatType::F32] = peak_rate(runtime::FloatType::F32, p.cores, seconds);
  // Kernels compute bf16 and f16 values in f32 here (no half-precision FMA
  // is used), so their peak is f32's.
  p.peak_flops[runtime::FloatType::BF16] = p.peak_flops[runtime::FloatType::F32];
  p.peak_flops[runtime::FloatType::F16] = p.peak_flops[runtime::FloatType::F32];
  say("measuring the packed product");
  const double packed = packed_product_rate(o.quick ? 128 : 384);

  say(fmt::format("fitting the layout model to {} samples", c.samples.size()));
  p.layout = model;
  p.layout = o.quick ? fit_layout_scale(c.samples, p, *shipped_profile().layout) : fit_layout_model(c.samples, p);
  p.layout->packed_flops = packed;
  for (const CalibrationSample& s : c.samples) c.predicted.push_back(kernel::predict(s.facts, s.layout, p).total);
  p.source = fmt::format(
      "quire profile calibrate{} on {}: cores from the OS, caches from sysfs, bandwidths by memcpy, peak rates by "
      "FMA chains (bf16 and f16 at f32's), spawn by pool calls of fixed work, the packed product by sgemm; {} fitted to {} kernel layouts "
      "timed natively",
      o.quick ? " --quick" : "", today(),
      o.quick ? "the shipped layout model's launch and one scale of its other times (its lane speedup and p kept)"
              : "the layout model",
      c.samples.size());
  return c;
}

std::string print_calibration(const Calibration& c) {
  const Profile& p = c.profile;
  const LayoutModel& m = *p.layout;
  std::string out;
  out += fmt::format("profile `{}`: {} cores, vectors of {} bytes\n", p.name, p.cores, p.vector_bytes);
  out += fmt::format("caches: L1 {}, L2 {}, L3 {} shared by {}, lines of {} bytes\n", bytes_text(p.caches.l1),
                     bytes_text(p.caches.l2), bytes_text(p.caches.l3), p.caches.l3_shared_by, p.caches.line);
  out += fmt::format("bandwidth, read + written: L2 {:.1f} GB/s, L3 {:.1f} GB/s (one core); memory {:.1f} GB/s ({} cores)\n",
                     p.l2_bandwidth / 1e9, p.l3_bandwidth / 1e9, p.memory_bandwidth / 1e9, p.cores);
  out += fmt::format("peak: f64 {:.1f} GFLOP/s, f32 {:.1f} GFLOP/s ({} cores; bf16 and f16 as f32)\n",
                     p.peak_flops.at(runtime::FloatType::F64) / 1e9, p.peak_flops.at(runtime::FloatType::F32) / 1e9,
                     p.cores);
  out += fmt::format("spawn: {:.2f} µs; packed f32 product: {:.1f} GFLOP/s (one thread)\n", m.spawn_seconds * 1e6,
                     m.packed_flops / 1e9);
  out += fmt::format(
      "model: launch {:.3g} µs, op {:.3g} ns, load {:.3g} ns, library call {:.3g} ns, fresh output {:.3g} ns/KiB, "
      "lane speedup {:.2f}, p {:.2f}\n",
      m.launch_seconds * 1e6, m.op_seconds * 1e9, m.load_seconds * 1e9, m.call_seconds * 1e9,
      m.fresh_seconds * 1024 * 1e9, m.lane_speedup, m.p);
  out += fmt::format("fit: {} points, u = {:.3f} (mean |predicted/measured − 1|), ρ = {:.3f} (Spearman)\n", m.points,
                     m.error, m.rank_correlation);
  // A dozen samples spread evenly over the measured range.
  std::vector<size_t> order(c.samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return c.samples[a].seconds < c.samples[b].seconds; });
  constexpr size_t kRows = 12;
  const size_t rows = std::min(kRows, order.size());
  out += fmt::format("  {:<24} {:<20} {:>12} {:>13}\n", "nest", "layout", "measured µs", "predicted µs");
  for (size_t r = 0; r < rows; ++r) {
    const size_t i = rows == 1 ? order[0] : order[r * (order.size() - 1) / (rows - 1)];
    const CalibrationSample& s = c.samples[i];
    out += fmt::format("  {:<24} {:<20} {:>12.2f} {:>13.2f}\n", s.nest, kernel::layout_text(s.layout), s.seconds * 1e6,
                       c.predicted[i] * 1e6);
  }
  return out;
}

LayoutModel layout_model_at(LayoutModel m, const std::vector<double>& x) {
  m.launch_seconds = bounded_exp(x.at(0));
  m.op_seconds = bounded_exp(x.at(1));
  m.load_seconds = bounded_exp(x.at(2));
  m.lane_speedup = bounded_exp(x.at(3));
  m.p = kPLow + (kPHigh - kPLow) / (1 + std::exp(-x.at(4)));
  m.call_seconds = bounded_exp(x.at(5));
  m.fresh_seconds = bounded_exp(x.at(6));
  return m;
}

}  // namespace quire::machine
