// A fused element-wise chain over 64 MiB of output against a memory copy of
// the same bytes, in one process: the native backend's streaming kernels as
// a fraction of the machine's bandwidth (issue target: at least 80 %).
//
//   bench_fused_elementwise [--threads N] [--reps R]
//
// The kernel is what lowering makes of `(x * 0.5 + y) * x - y` under the f32
// policy (every step rounded to f32), over 2^24 elements held as f32 (the
// view a compiled kernel reads and writes an f32 value in, as one kernel's
// output reaches the next): it reads 2 × 64 MiB and writes 64 MiB. The copy
// moves the same 192 MiB (96 MiB read and 96 MiB written), on the same
// threads, through memcpy.

#include <fmt/format.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quire/kernel/layout.h"
#include "quire/native/native_runner.h"
#include "quire/runtime/workers.h"

using namespace quire;

namespace {

kernel::Kernel chain(int64_t n, int lanes, int split) {
  kernel::KernelBuilder b("mul+add+mul+sub");
  const int x = b.buffer(kernel::ElemType::F32, {n});
  const int y = b.buffer(kernel::ElemType::F32, {n});
  const int out = b.buffer(kernel::ElemType::F32, {n});
  auto [loop, at] = bench::element_loop(b, n);
  using runtime::BinaryOp;
  const auto f32 = [&](int e) { return b.round(runtime::FloatType::F32, e); };
  const int xv = b.load(x, at), yv = b.load(y, at);
  const int s0 = f32(b.binary(BinaryOp::Mul, xv, b.constant(0.5)));
  const int s1 = f32(b.binary(BinaryOp::Add, s0, yv));
  const int s2 = f32(b.binary(BinaryOp::Mul, s1, xv));
  const int s3 = f32(b.binary(BinaryOp::Sub, s2, yv));
  kernel::Stmt store;
  store.kind = kernel::StmtKind::Store;
  store.buffer = out;
  store.index = at;
  store.expr = s3;
  loop.body.push_back(store);
  b.kernel().body.push_back(loop);
  kernel::Kernel k = b.take();
  kernel::apply_layout(k, kernel::Layout{lanes, split});
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  // As `quire` itself does (src/cli/main.cpp): large blocks stay on the heap,
  // so each launch's output is not faulted in afresh.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int threads = 2, reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--reps") reps = std::atoi(argv[i + 1]);
  }
  const int64_t n = int64_t{1} << 24;
  runtime::Tensor x = runtime::Tensor::real({n}), y = runtime::Tensor::real({n});
  for (int64_t i = 0; i < n; ++i) {
    x.reals[static_cast<size_t>(i)] = static_cast<float>(0.001 * static_cast<double>(i % 1000));
    y.reals[static_cast<size_t>(i)] = static_cast<float>(1.0 - 0.0005 * static_cast<double>(i % 777));
  }
  (void)x.reals.narrow();  // each input in its f32 view, as a kernel's output is
  (void)y.reals.narrow();
  const double bytes = 3.0 * static_cast<double>(n) * 4;

  // The copy: the same bytes, the same threads, each thread a contiguous part.
  std::vector<float> src(static_cast<size_t>(2 * n)), dst(static_cast<size_t>(2 * n));
  auto copy = [&] {
    native::WorkerPool::shared().parallel_for(threads, threads, [&](int64_t part, int) {
      // 1.5n floats copied move 3n floats' bytes (read + written), as the chain does.
      const size_t total = static_cast<size_t>(3 * n) / 2;
      const size_t lo = total * static_cast<size_t>(part) / static_cast<size_t>(threads);
      const size_t hi = total * static_cast<size_t>(part + 1) / static_cast<size_t>(threads);
      std::memcpy(dst.data() + lo, src.data() + lo, (hi - lo) * sizeof(float));
    });
  };
  std::vector<double> copy_times;
  for (int r = 0; r <= reps; ++r) {
    const auto start = bench::Clock::now();
    copy();
    if (r > 0) copy_times.push_back(bench::seconds_since(start));
  }
  const double copy_rate = bytes / bench::median(copy_times);

  fmt::print("fused element-wise chain over {} elements (f32 steps, f32 storage), {} threads\n", n, threads);
  fmt::print("memcpy of the same {:.0f} MiB: {:.1f} GB/s (read + written)\n", bytes / (1 << 20), copy_rate / 1e9);
  for (auto [lanes, split] : {std::pair{1, 1}, {8, 1}, {1, threads}, {8, threads}}) {
    const kernel::Kernel k = chain(n, lanes, split);
    native::NativeRunner runner;
    runner.set_threads(threads);
    runner.add(0, k);
    std::vector<double> times;
    for (int r = 0; r <= reps; ++r) {
      const auto start = bench::Clock::now();
      runtime::Tensor out = runner.run(0, k, {&x, &y});
      if (r > 0) times.push_back(bench::seconds_since(start));
    }
    const double rate = bytes / bench::median(times);
    fmt::print("{:<22} {:8.2f} ms  {:6.1f} GB/s  {:5.1f} % of the copy\n", kernel::layout_text({lanes, split}),
               bench::median(times) * 1e3, rate / 1e9, 100 * rate / copy_rate);
  }
  return 0;
}
