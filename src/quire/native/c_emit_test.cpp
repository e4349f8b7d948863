// C emission: the text's shape, and the C rounding helpers against
// runtime::round_to on a million doubles and every edge of every format.
#include "quire/native/c_emit.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "quire/native/c_compiler.h"
#include "quire/native/native_testing.h"
#include "quire/runtime/kernels.h"
#include "quire/runtime/runtime_error.h"

namespace quire::native {
namespace {

using kernel::Affine;
using kernel::ElemType;
using kernel::KernelBuilder;
using kernel::Stmt;
using kernel::StmtKind;
using runtime::FloatType;

/// A fresh cache directory for one test, removed afterwards.
class CEmitCompiled : public testing::FreshCacheTest {
 protected:
  CompilerSettings settings() const {
    CompilerSettings s = CompilerSettings::from_environment();
    s.cache_dir = dir_;
    return s;
  }
};

// A store of element i of a one-buffer copy: `out[i] = in[i]` over n elements.
kernel::Kernel copy_kernel(int64_t n) {
  KernelBuilder b("copy");
  const int in = b.buffer(ElemType::F32, {n});
  const int out = b.buffer(ElemType::F32, {n});
  const int i = b.new_loop_var();
  Stmt loop;
  loop.kind = StmtKind::Loop;
  loop.var = i;
  loop.extent = n;
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.index = Affine{0, {{i, 1}}};
  store.expr = b.load(in, Affine{0, {{i, 1}}});
  loop.body.push_back(store);
  b.kernel().body.push_back(loop);
  return b.take();
}

TEST(CEmit, TextCarriesPragmaIrAndSignature) {
  const kernel::Kernel k = copy_kernel(4);
  const std::string c = emit_c(k, "quire_copy");
  EXPECT_NE(c.find("#pragma STDC FP_CONTRACT OFF"), std::string::npos);
  for (const char* header : {"#include <math.h>", "#include <stdint.h>", "#include <string.h>"})
    EXPECT_NE(c.find(header), std::string::npos) << header;
  EXPECT_NE(c.find(kernel::print_kernel(k)), std::string::npos) << c;
  EXPECT_NE(c.find("void quire_copy(const void* const* inputs, void* output, int64_t lo, int64_t hi) {"),
            std::string::npos)
      << c;
  // Its loop is not marked independent: no range to take, the whole loop runs.
  EXPECT_NE(c.find("(void)lo; (void)hi;"), std::string::npos) << c;
  EXPECT_NE(c.find("for (int64_t i0 = 0; i0 < 4; ++i0) {"), std::string::npos) << c;
  EXPECT_EQ(c, emit_c(k, "quire_copy")) << "emission is deterministic (the cache key depends on it)";
  // Marked independent, it is the split loop: the caller gives its range.
  kernel::Kernel split = k;
  split.body[0].independent = true;
  EXPECT_NE(emit_c(split, "quire_copy").find("for (int64_t i0 = lo; i0 < hi; ++i0) {"), std::string::npos);
}

// The layout's lanes are f64 lanes; over f32-held buffers the loop runs
// twice as many iterations at once, so that GCC's vectors hold whole zmm of
// floats (c_emit.cpp, simdlen).
TEST(CEmit, LanesOverF32BuffersRunTwiceTheIterations) {
  kernel::Kernel k = copy_kernel(64);
  k.body[0].lanes = 8;
  EXPECT_NE(emit_c(k).find("#pragma omp simd simdlen(16)"), std::string::npos) << emit_c(k);
  for (kernel::Buffer& b : k.buffers) b.type = ElemType::F64;
  EXPECT_NE(emit_c(k).find("#pragma omp simd simdlen(8)"), std::string::npos) << emit_c(k);
}

// out[i] = round_f32(op(in[i])) over n f32 elements, `lanes` at a time.
kernel::Kernel rounded_unary_kernel(runtime::UnaryOp op, int64_t n, int lanes) {
  kernel::Kernel k = copy_kernel(n);
  KernelBuilder b("rounded unary");
  b.kernel() = k;
  Stmt& store = b.kernel().body[0].body[0];
  store.expr = b.round(FloatType::F32, b.unary(op, store.expr));
  b.kernel().body[0].lanes = lanes;
  b.kernel().body[0].independent = true;
  return b.take();
}

// erf and gelu rounded to f32 in a loop with lanes take elementary_fast.inc's
// shortcut, in blocks that rerun with the reference's functions when in
// doubt; a scalar loop, or any other operation, calls the reference's.
TEST(CEmit, RoundedErfAndGeluInLanesTakeTheShortcutWithARerun) {
  for (runtime::UnaryOp op : {runtime::UnaryOp::Erf, runtime::UnaryOp::Gelu}) {
    const std::string name = runtime::op_name(op);
    const std::string c = emit_c(rounded_unary_kernel(op, 1000, 8), "quire_f");
    const std::string body = c.substr(c.find("void quire_f("));
    SCOPED_TRACE(body);
    EXPECT_NE(body.find("for (int64_t i0_b = lo; i0_b < hi; i0_b += 256) {"), std::string::npos);
    EXPECT_NE(body.find(fmt::format("= quire_fast_{}(", name)), std::string::npos);
    EXPECT_NE(body.find(fmt::format("quire_doubt |= quire_f32_doubt(t1, quire_fast_{}_window(t0));", name)),
              std::string::npos);
    EXPECT_NE(body.find("reduction(|:quire_doubt)"), std::string::npos);
    EXPECT_NE(body.find(fmt::format("if (quire_doubt) {{")), std::string::npos);
    EXPECT_NE(body.find(fmt::format("= quire_{}(", name)), std::string::npos) << "the rerun";
    const std::string scalar = emit_c(rounded_unary_kernel(op, 1000, 1), "quire_f");
    EXPECT_EQ(scalar.substr(scalar.find("void quire_f(")).find("quire_fast_"), std::string::npos);
  }
  const std::string exp = emit_c(rounded_unary_kernel(runtime::UnaryOp::Exp, 1000, 8), "quire_f");
  EXPECT_EQ(exp.substr(exp.find("void quire_f(")).find("quire_doubt"), std::string::npos);
}

TEST(CEmit, EveryOperationHasItsHelper) {
  const std::string prelude = c_prelude();
  for (int op = 0; op <= static_cast<int>(runtime::UnaryOp::Not); ++op) {
    const std::string name = runtime::op_name(static_cast<runtime::UnaryOp>(op));
    EXPECT_NE(prelude.find(fmt::format(" quire_{}(double x)", name)), std::string::npos) << name;
  }
  for (int op = 0; op <= static_cast<int>(runtime::BinaryOp::Or); ++op) {
    const std::string name = runtime::op_name(static_cast<runtime::BinaryOp>(op));
    EXPECT_NE(prelude.find(fmt::format(" quire_{}(double a, double b)", name)), std::string::npos) << name;
  }
  for (const runtime::FloatTypeInfo& f : runtime::kFloatTypes)
    EXPECT_NE(prelude.find(fmt::format(" quire_round_{}(double x)", f.name)), std::string::npos) << f.name;
  // The runtime's constants, in hex, exactly.
  EXPECT_NE(prelude.find("quire_sqrt2_over_pi = 0x1.9884533d43651p-1;"), std::string::npos) << prelude;
  EXPECT_NE(prelude.find("quire_sqrt1_2 = 0x1.6a09e667f3bcdp-1;"), std::string::npos) << prelude;
}

TEST(CEmit, IndexOutsideItsLoopIsMisuse) {
  kernel::Kernel k = copy_kernel(4);
  Stmt stray = k.body[0].body[0];  // the store, moved out of its loop
  k.body.push_back(stray);
  EXPECT_THROW(emit_c(k), runtime::KernelMisuse);
}

// ---------------------------------------------------------------------------
// The rounding helpers against runtime::round_to

std::vector<double> edge_cases() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {0.0,
                            1.0,
                            std::numeric_limits<double>::quiet_NaN(),
                            std::bit_cast<double>(uint64_t{0x7FF0000000000001}),  // a signalling NaN
                            std::bit_cast<double>(uint64_t{0x7FF8DEADBEEF0001}),  // a NaN with a payload
                            inf,
                            std::numeric_limits<double>::max(),
                            std::numeric_limits<double>::min(),
                            std::numeric_limits<double>::denorm_min(),
                            0x1.fffffffffffffp-1023};
  for (const runtime::FloatTypeInfo& f : runtime::kFloatTypes) {
    const double ulp_one = std::ldexp(1.0, 1 - f.precision);  // spacing at 1
    const double top_ulp = std::ldexp(1.0, f.max_exp + 1 - f.precision);
    const double sub = f.smallest_subnormal;
    const double min_normal = std::ldexp(1.0, f.min_exp);
    for (double x : {f.largest_finite, f.largest_finite + top_ulp / 2, f.largest_finite + top_ulp / 4,
                     f.largest_finite + top_ulp * 0.75, std::ldexp(1.0, f.max_exp + 1), sub, sub / 2, sub / 4,
                     sub * 0.75, sub * 1.5, sub * 2.5, sub * 3.5, min_normal, min_normal - sub / 2,
                     min_normal - sub, min_normal + sub / 2, 1.0 + ulp_one / 2, 1.0 + ulp_one * 1.5,
                     1.0 + ulp_one * 2.5, 1.0 + ulp_one / 4, 2.0 - ulp_one / 4, 3.0 + ulp_one}) {
      for (double y : {x, std::nextafter(x, 0.0), std::nextafter(x, inf)}) xs.push_back(y);
    }
  }
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  return xs;
}

std::vector<double> random_doubles(size_t count) {
  std::mt19937_64 rng(20240917);
  std::vector<double> xs;
  xs.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    switch (i % 4) {
      case 0: xs.push_back(std::bit_cast<double>(bits)); break;  // every exponent, NaNs included
      case 1: {
        // The exponents the narrow formats live in, with f16's and bf16's
        // subnormal ranges and overflow thresholds.
        const int e = static_cast<int>(rng() % 190) - 160;
        const double m = 1.0 + static_cast<double>(bits >> 12) * 0x1p-52;
        xs.push_back(std::ldexp((bits & 1) ? -m : m, e));
        break;
      }
      case 2: {
        // Ties and near-ties of bf16 (45 dropped bits) and f16 (42).
        const int dropped = (bits & 2) ? 45 : 42;
        const uint64_t exponent = (1023 - 30 + rng() % 60) << 52;
        uint64_t mantissa = (rng() & ((uint64_t{1} << 52) - 1)) & ~((uint64_t{1} << dropped) - 1);
        mantissa |= uint64_t{1} << (dropped - 1);
        const int64_t nudge = static_cast<int64_t>(rng() % 3) - 1;
        xs.push_back(std::bit_cast<double>(((bits & 1) << 63 | exponent | mantissa) + static_cast<uint64_t>(nudge)));
        break;
      }
      default: xs.push_back(std::bit_cast<double>(bits & ~(uint64_t{1} << 62)));  // every magnitude below 2
    }
  }
  return xs;
}

TEST_F(CEmitCompiled, RoundingHelpersMatchRoundTo) {
  // One C function rounds every x to every format: out[k * n + i] = round_k(x[i]).
  std::string c = c_prelude();
  c += "void quire_round_all(const double* x, double* out, int64_t n) {\n"
       "  for (int64_t i = 0; i < n; ++i) {\n";
  for (int t = 0; t < runtime::kFloatTypeCount; ++t)
    c += fmt::format("    out[{} * n + i] = quire_round_{}(x[i]);\n", t, runtime::kFloatTypes[t].name);
  c += "  }\n}\n";
  CCompiler compiler(settings());
  using RoundAll = void (*)(const double*, double*, int64_t);
  const auto round_all = reinterpret_cast<RoundAll>(compiler.load(c, "quire_round_all"));

  std::vector<double> xs = edge_cases();
  const std::vector<double> more = random_doubles(1'000'000);
  xs.insert(xs.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<double> out(static_cast<size_t>(n) * runtime::kFloatTypeCount);
  round_all(xs.data(), out.data(), n);

  for (int t = 0; t < runtime::kFloatTypeCount; ++t) {
    const runtime::FloatTypeInfo& f = runtime::kFloatTypes[t];
    int failures = 0;
    for (int64_t i = 0; i < n && failures < 10; ++i) {
      const double want = runtime::round_to(f.type, xs[static_cast<size_t>(i)]);
      const double got = out[static_cast<size_t>(t * n + i)];
      const bool same = std::isnan(want) ? std::isnan(got) && std::signbit(got) == std::signbit(want)
                                         : std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want);
      if (!same) {
        ++failures;
        ADD_FAILURE() << f.name << ": x = " << fmt::format("{:a}", xs[static_cast<size_t>(i)])
                      << fmt::format(" gives {:a}, round_to gives {:a}", got, want);
      }
    }
  }
}

// Compiled, the shortcut's blocks give the reference's bits: over a sweep of
// the floats (every 1021st bit pattern, and runs of neighbours), arguments
// whose fast result is in doubt among them, so that some blocks rerun.
TEST_F(CEmitCompiled, RoundedErfAndGeluInLanesHaveTheReferencesBits) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 1021) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  const int64_t n = static_cast<int64_t>(xs.size());
  CCompiler compiler(settings());
  for (runtime::UnaryOp op : {runtime::UnaryOp::Erf, runtime::UnaryOp::Gelu}) {
    SCOPED_TRACE(runtime::op_name(op));
    using Kernel = void (*)(const void* const*, void*, int64_t, int64_t);
    const auto f = reinterpret_cast<Kernel>(compiler.load(emit_c(rounded_unary_kernel(op, n, 8), "quire_f"), "quire_f"));
    std::vector<float> out(xs.size());
    const void* inputs[] = {xs.data()};
    f(inputs, out.data(), 0, n);
    int failures = 0;
    for (size_t i = 0; i < xs.size() && failures < 10; ++i) {
      const float want = static_cast<float>(runtime::apply_unary(op, xs[i]));
      const bool same = std::isnan(want) ? std::isnan(out[i])
                                         : std::bit_cast<uint32_t>(out[i]) == std::bit_cast<uint32_t>(want);
      if (!same) {
        ++failures;
        ADD_FAILURE() << fmt::format("x = {:a} gives {:a}, the reference {:a}", xs[i], out[i], want);
      }
    }
  }
}

}  // namespace
}  // namespace quire::native
