// erf and gelu rounded to f32, compiled: elementary_fast.inc's shortcut with
// its rounding test against the reference functions alone, and glibc's own
// f32 erff and a GELU through it as the peer, in one process, on one thread.
// (exp alone has no shortcut: one of degree 10 measured 1.80 ns an element
// here against the reference's 1.65. Beside an erf of the same element, as in
// the GELU's gradient, it has one: docs/backends.md.)
//
//   bench_elementary_f32 [--reps R]
//
// Each kernel is what lowering makes of `erf(x)` or `gelu(x)` under the f32
// policy, over 2^20 standard normal floats (the arguments a normalized layer
// gives a GELU), at 8 lanes: emitted once, then compiled as emitted and with
// QUIRE_FAST_F32 set to 0 (every block runs the reference functions). Both
// give the same bits, which the bench checks before it times them.

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/native/c_compiler.h"
#include "quire/native/c_emit.h"

using namespace quire;

namespace {

using KernelFn = void (*)(const void* const*, void*, int64_t, int64_t);

kernel::Kernel rounded(runtime::UnaryOp op, int64_t n) {
  kernel::KernelBuilder b(runtime::op_name(op));
  const int in = b.buffer(kernel::ElemType::F32, {n});
  const int out = b.buffer(kernel::ElemType::F32, {n});
  auto [loop, at] = bench::element_loop(b, n);
  loop.lanes = 8;
  kernel::Stmt store;
  store.kind = kernel::StmtKind::Store;
  store.buffer = out;
  store.index = at;
  store.expr = b.round(runtime::FloatType::F32, b.unary(op, b.load(in, at)));
  loop.body.push_back(store);
  b.kernel().body.push_back(loop);
  return b.take();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  const int64_t n = int64_t{1} << 20;
  std::vector<float> normals(static_cast<size_t>(n)), x, fast(normals.size()), reference(normals.size()),
      peer(normals.size());
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : normals) v = normal(rng);
  const void* inputs[] = {nullptr};

  native::CCompiler compiler;
  fmt::print("f32 results over 2^20 standard normal floats, 1 thread, median of {} runs (ns an element)\n", reps);
  for (runtime::UnaryOp op : {runtime::UnaryOp::Erf, runtime::UnaryOp::Gelu}) {
    x = normals;
    inputs[0] = x.data();
    const std::string c = native::emit_c(rounded(op, n), "quire_f");
    std::string without = c;
    const std::string on = "#define QUIRE_FAST_F32 1", off = "#define QUIRE_FAST_F32 0";
    without.replace(without.find(on), on.size(), off);
    const auto f = reinterpret_cast<KernelFn>(compiler.load(c, "quire_f"));
    const auto g = reinterpret_cast<KernelFn>(compiler.load(without, "quire_f"));
    f(inputs, fast.data(), 0, n);
    g(inputs, reference.data(), 0, n);
    for (size_t i = 0; i < x.size(); ++i)
      if (std::bit_cast<uint32_t>(fast[i]) != std::bit_cast<uint32_t>(reference[i])) {
        fmt::print("{}: the shortcut's bits differ at x = {:a}\n", runtime::op_name(op), x[i]);
        return 1;
      }
    const double with_shortcut = bench::median_seconds(reps, [&] { f(inputs, fast.data(), 0, n); });
    const double reference_only = bench::median_seconds(reps, [&] { g(inputs, reference.data(), 0, n); });
    // The peer: glibc's f32 functions, element by element as a libm call runs.
    const double libm = bench::median_seconds(reps, [&] {
      for (size_t i = 0; i < x.size(); ++i)
        peer[i] = op == runtime::UnaryOp::Erf ? erff(x[i])
                                              : 0.5f * x[i] * (1.0f + erff(x[i] * static_cast<float>(M_SQRT1_2)));
    });
    const double per = 1e9 / static_cast<double>(n);
    fmt::print("{:<5} shortcut {:5.2f}   reference alone {:5.2f} ({:.2f}×)   glibc {:5.2f} ({:.2f}×)\n",
               runtime::op_name(op), with_shortcut * per, reference_only * per, reference_only / with_shortcut,
               libm * per, libm / with_shortcut);
  }
  return 0;
}
