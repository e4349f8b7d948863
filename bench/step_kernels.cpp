// Two of a training step's kernels as the native backend emits them, each
// against the emission it replaced, compiled in one process, over a 256 × 256
// f32 tensor on one thread (the tower's D = 256, B = 256):
//
// - the GELU's gradient, whose exp(−x²/2) takes its shortcut beside erf's
//   (elementary_fast.inc's quire_fast_exp_near), against the same kernel with
//   the square read from a copy of x: the same values, but the emitter pairs
//   no exp with the erf, so the exp is the reference's, as before the pairing;
// - a row sum whose lanes are rows (an RMSNorm's mean), whose fold is unrolled
//   over the lane tile, against the same C with that statement a simd loop
//   again (`#pragma GCC unroll 32` replaced by the simd pragma it had).
//
//   bench_step_kernels [--reps R]
//
// Each pair's bits are checked equal before they are timed; the figures are
// the median ns an element of R runs.

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
using kernel::Affine;
using kernel::ElemType;
using kernel::Stmt;
using runtime::BinaryOp;
using runtime::FloatType;

constexpr int64_t kRows = 256, kCols = 256;

/// The gradient of gelu at x times ct as the vjp writes it, over [rows, cols]
/// (inputs: x, the constants √½, 1, ½, −½ and 1/√(2π) as f32[] buffers, ct,
/// and x again, whose square the exp reads when `square_of_copy`).
kernel::Kernel gelu_gradient(bool square_of_copy) {
  kernel::KernelBuilder b("gelu gradient");
  const int x = b.buffer(ElemType::F32, {kRows, kCols});
  std::vector<int> c;
  for (int i = 0; i < 5; ++i) c.push_back(b.buffer(ElemType::F32, {}));
  const int ct = b.buffer(ElemType::F32, {kRows, kCols});
  const int copy = b.buffer(ElemType::F32, {kRows, kCols});
  const int out = b.buffer(ElemType::F32, {kRows, kCols});
  const int i = b.new_loop_var(), j = b.new_loop_var();
  Stmt cols = kernel::loop_stmt(j, kCols, {}, /*independent=*/true);
  cols.lanes = 8;
  const Affine at{0, {{i, kCols}, {j, 1}}};
  auto f32 = [&](int e) { return b.round(FloatType::F32, e); };
  auto constant = [&](int k) { return b.load(c[static_cast<size_t>(k)], Affine{}); };
  auto then = [&](int expr) {
    cols.body.push_back(kernel::set_stmt(b.new_scalar(), expr));
    return b.scalar(cols.body.back().scalar);
  };
  const int s0 = then(f32(b.binary(BinaryOp::Mul, b.load(x, at), constant(0))));
  const int s1 = then(f32(b.unary(runtime::UnaryOp::Erf, s0)));
  const int s3 = then(f32(b.binary(BinaryOp::Mul, constant(2), then(f32(b.binary(BinaryOp::Add, constant(1), s1))))));
  const int squared = square_of_copy ? copy : x;
  const int s4 = then(f32(b.binary(BinaryOp::Mul, b.load(squared, at), b.load(squared, at))));
  const int s6 = then(f32(b.unary(runtime::UnaryOp::Exp, then(f32(b.binary(BinaryOp::Mul, constant(3), s4))))));
  const int s8 = then(f32(b.binary(BinaryOp::Mul, b.load(x, at), then(f32(b.binary(BinaryOp::Mul, constant(4), s6))))));
  const int s9 = then(f32(b.binary(BinaryOp::Add, s3, s8)));
  cols.body.push_back(kernel::store_stmt(out, at, f32(b.binary(BinaryOp::Mul, b.load(ct, at), s9))));
  b.kernel().body.push_back(kernel::loop_stmt(i, kRows, {cols}, /*independent=*/true));
  return b.take();
}

/// mean(axis 1) of an f32 [rows, cols] tensor, lanes over the rows: s = 0,
/// then s = f32(s + x[i, j]) over j in order, and f32(s / cols) stored.
kernel::Kernel row_means() {
  kernel::KernelBuilder b("mean");
  const int x = b.buffer(ElemType::F32, {kRows, kCols});
  const int out = b.buffer(ElemType::F32, {kRows});
  const int i = b.new_loop_var(), j = b.new_loop_var();
  const int sum = b.new_scalar();
  const int step =
      b.round(FloatType::F32, b.binary(BinaryOp::Add, b.scalar(sum), b.load(x, Affine{0, {{i, kCols}, {j, 1}}})));
  const int mean = b.round(FloatType::F32, b.binary(BinaryOp::Div, b.scalar(sum), b.constant(kCols)));
  Stmt rows = kernel::loop_stmt(
      i, kRows,
      {kernel::set_stmt(sum, b.constant(0.0)), kernel::loop_stmt(j, kCols, {kernel::set_stmt(sum, step)}),
       kernel::store_stmt(out, Affine{0, {{i, 1}}}, mean)},
      /*independent=*/true);
  rows.lanes = 8;
  b.kernel().body.push_back(rows);
  return b.take();
}

/// Times two compiled versions of one kernel on the same inputs after
/// checking that their outputs have the same bits; prints ns an element.
int compare(const char* what, const char* before_name, const char* after_name, native::CCompiler& compiler,
            const std::string& before, const std::string& after, const std::vector<const void*>& inputs,
            size_t outputs, int reps) {
  const auto f = reinterpret_cast<KernelFn>(compiler.load(before, "quire_f"));
  const auto g = reinterpret_cast<KernelFn>(compiler.load(after, "quire_f"));
  std::vector<float> a(outputs), b(outputs);
  f(inputs.data(), a.data(), 0, kRows);
  g(inputs.data(), b.data(), 0, kRows);
  for (size_t i = 0; i < outputs; ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      fmt::print("{}: the two kernels' bits differ at element {}\n", what, i);
      return 1;
    }
  const double t_before = bench::median_seconds(reps, [&] { f(inputs.data(), a.data(), 0, kRows); });
  const double t_after = bench::median_seconds(reps, [&] { g(inputs.data(), b.data(), 0, kRows); });
  const double per = 1e9 / static_cast<double>(kRows * kCols);
  fmt::print("{:<14} {} {:5.3f}   {} {:5.3f}   ({:.2f}×)\n", what, before_name, t_before * per, after_name,
             t_after * per, t_before / t_after);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 201;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  const size_t n = static_cast<size_t>(kRows * kCols);
  std::vector<float> x(n), ct(n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  for (float& v : x) v = normal(rng);
  for (float& v : ct) v = uniform(rng);
  const std::vector<float> constants = {static_cast<float>(M_SQRT1_2), 1.0f, 0.5f, -0.5f,
                                        static_cast<float>(0.3989422804014327)};

  native::CCompiler compiler;
  fmt::print("256 × 256 f32, 1 thread, median of {} runs (ns an element)\n", reps);
  std::vector<const void*> gradient_inputs = {x.data()};
  for (const float& c : constants) gradient_inputs.push_back(&c);
  gradient_inputs.push_back(ct.data());
  gradient_inputs.push_back(x.data());  // the copy: the same values
  if (compare("gelu gradient", "exp alone", "exp beside erf", compiler, native::emit_c(gelu_gradient(true), "quire_f"),
              native::emit_c(gelu_gradient(false), "quire_f"), gradient_inputs, n, reps))
    return 1;

  const std::string unrolled = native::emit_c(row_means(), "quire_f");
  std::string simd = unrolled;
  const std::string pragma = "#pragma GCC unroll 32";
  const size_t at = simd.find(pragma);
  if (at == std::string::npos) {
    fmt::print("row sums: the fold is not unrolled\n");
    return 1;
  }
  simd.replace(at, pragma.size(), "#pragma omp simd simdlen(16)");
  return compare("row sums", "simd loop", "unrolled", compiler, simd, unrolled, {x.data()}, kRows, reps);
}
