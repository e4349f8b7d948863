// C emission: the text's shape, and the C rounding helpers against
// runtime::round_to on a million doubles and every edge of every format.
#include "quire/native/c_emit.h"

#include <fmt/format.h>
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

#include "quire/kernel/kernel_interpreter.h"
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

// The GELU's gradient as the vjp writes it, over n f32 elements x with the
// cotangent ct, its constants read from f32[] buffers (as realization gives
// them): s0 = f32(x·c1), s1 = f32(erf(s0)), s3 = f32(c3·f32(c2 + s1)), s4 =
// f32(x·x), s5 = f32(c4·s4), s6 = f32(exp(s5)), and out = f32(ct·f32(s3 +
// f32(x·f32(c5·s6)))). With `square_of_ct`, s4 = f32(ct·ct): the exp's
// argument is then not the erf's.
kernel::Kernel gelu_gradient_kernel(int64_t n, bool square_of_ct = false) {
  KernelBuilder b("gelu gradient");
  const int x = b.buffer(ElemType::F32, {n});
  std::vector<int> c;
  for (int i = 0; i < 5; ++i) c.push_back(b.buffer(ElemType::F32, {}));
  const int ct = b.buffer(ElemType::F32, {n});
  const int out = b.buffer(ElemType::F32, {n});
  const int i = b.new_loop_var();
  const Affine at{0, {{i, 1}}};
  Stmt loop = kernel::loop_stmt(i, n, {}, /*independent=*/true);
  loop.lanes = 8;
  auto set = [&](int expr) {
    loop.body.push_back(kernel::set_stmt(b.new_scalar(), expr));
    return b.scalar(loop.body.back().scalar);
  };
  auto f32 = [&](int e) { return b.round(FloatType::F32, e); };
  using runtime::BinaryOp;
  auto constant = [&](int k) { return b.load(c[static_cast<size_t>(k)], Affine{}); };
  const int s0 = set(f32(b.binary(BinaryOp::Mul, b.load(x, at), constant(0))));
  const int s1 = set(f32(b.unary(runtime::UnaryOp::Erf, s0)));
  const int s2 = set(f32(b.binary(BinaryOp::Add, constant(1), s1)));
  const int s3 = set(f32(b.binary(BinaryOp::Mul, constant(2), s2)));
  const int squared = square_of_ct ? ct : x;
  const int s4 = set(f32(b.binary(BinaryOp::Mul, b.load(squared, at), b.load(squared, at))));
  const int s5 = set(f32(b.binary(BinaryOp::Mul, constant(3), s4)));
  const int s6 = set(f32(b.unary(runtime::UnaryOp::Exp, s5)));
  const int s7 = set(f32(b.binary(BinaryOp::Mul, constant(4), s6)));
  const int s8 = set(f32(b.binary(BinaryOp::Mul, b.load(x, at), s7)));
  const int s9 = set(f32(b.binary(BinaryOp::Add, s3, s8)));
  loop.body.push_back(kernel::store_stmt(out, at, f32(b.binary(BinaryOp::Mul, b.load(ct, at), s9))));
  b.kernel().body.push_back(loop);
  return b.take();
}

// In a fast block, the exp of the GELU's gradient takes the shortcut beside
// the erf of the same x (elementary_fast.inc's quire_fast_exp_near), its
// partner's argument evaluated again from the inputs; an exp of another
// element's square keeps the reference exp.
TEST(CEmit, TheGeluGradientsExpTakesTheShortcutBesideItsErf) {
  const std::string c = emit_c(gelu_gradient_kernel(1000), "quire_f");
  const std::string body = c.substr(c.find("void quire_f("));
  const std::string fast = body.substr(0, body.find("if (quire_doubt) {"));
  SCOPED_TRACE(body);
  EXPECT_NE(fast.find("= quire_fast_erf(s0);"), std::string::npos);
  EXPECT_NE(fast.find("= quire_fast_exp_near(t"), std::string::npos);
  EXPECT_NE(fast.find("quire_doubt |= quire_f32_doubt(t"), std::string::npos);
  EXPECT_NE(fast.find("quire_fast_exp_near_window(t"), std::string::npos);
  EXPECT_EQ(fast.find("quire_exp("), std::string::npos);
  EXPECT_NE(body.find("= quire_exp(s5);"), std::string::npos) << "the rerun";

  const std::string other = emit_c(gelu_gradient_kernel(1000, /*square_of_ct=*/true), "quire_f");
  const std::string other_body = other.substr(other.find("void quire_f("));
  EXPECT_NE(other_body.find("= quire_fast_erf(s0);"), std::string::npos) << other_body;
  EXPECT_EQ(other_body.find("= quire_fast_exp_near("), std::string::npos) << other_body;
}

// Column sums of an f32 [rows, cols] matrix: for each column j (lanes over
// j, so the fold runs in a lane tile), s0 = 0, then s0 = round_f32(s0 + x[i, j])
// over the rows in order, stored. Each column's s1 keeps the unrounded f64
// sum of the last step, and s2 its bf16 rounding, both stored into nothing
// but the scalars: they exist to be declared double. With `f64_sums`, s0
// takes the unrounded sums and the output is f64. With `of_rows`, the sums
// are the rows' (lanes over i, the fold over j): the lanes read x a row
// apart.
kernel::Kernel column_sums(int64_t rows, int64_t cols, int lanes, bool f64_sums = false, bool of_rows = false) {
  KernelBuilder b(of_rows ? "row sums" : "column sums");
  const int x = b.buffer(ElemType::F32, {rows, cols});
  const int out = b.buffer(f64_sums ? ElemType::F64 : ElemType::F32, {of_rows ? rows : cols});
  // j: the sums' loop (the lanes), i: the fold's.
  const int j = b.new_loop_var(), i = b.new_loop_var();
  const int s0 = b.new_scalar(), s1 = b.new_scalar(), s2 = b.new_scalar();
  using kernel::set_stmt;
  const Affine at = of_rows ? Affine{0, {{j, cols}, {i, 1}}} : Affine{0, {{i, cols}, {j, 1}}};
  const int sum = b.binary(runtime::BinaryOp::Add, b.scalar(s0), b.load(x, at));
  Stmt inner = kernel::loop_stmt(i, of_rows ? cols : rows,
                                 {set_stmt(s1, sum), set_stmt(s2, b.round(FloatType::BF16, sum)),
                                  set_stmt(s0, f64_sums ? sum : b.round(FloatType::F32, sum))});
  Stmt outer = kernel::loop_stmt(
      j, of_rows ? rows : cols,
      {set_stmt(s0, b.constant(0.0)), inner, kernel::store_stmt(out, Affine{0, {{j, 1}}}, b.scalar(s0))},
      /*independent=*/true);
  outer.lanes = lanes;
  b.kernel().body.push_back(outer);
  return b.take();
}

// A scalar whose every value is an f32 value (its 0 start, roundings to f32
// or a narrower type, f32 loads, f32-exact constants, such scalars and
// `where`s of them) is a C float, in a lane tile an array of floats; the
// others stay double: an f64 operation's result, a constant f32 does not
// hold, or a NaN constant.
TEST(CEmit, ScalarsHoldingF32ValuesAloneAreFloats) {
  const std::string c = emit_c(column_sums(8, 64, 8), "quire_f");
  const std::string body = c.substr(c.find("void quire_f("));
  SCOPED_TRACE(body);
  EXPECT_NE(body.find("float s0 = 0.0;"), std::string::npos);
  EXPECT_NE(body.find("double s1 = 0.0;"), std::string::npos);
  EXPECT_NE(body.find("float s2 = 0.0;"), std::string::npos) << "a bf16 rounding's values are f32's";
  EXPECT_NE(body.find("float s0_v[32] = {0};"), std::string::npos) << "the lane tile's accumulators";
  EXPECT_NE(body.find("double s1_v[32] = {0};"), std::string::npos);
  EXPECT_NE(body.find("s0_v[i0_l] = (float)"), std::string::npos);

  for (double v : {0.1, std::numeric_limits<double>::quiet_NaN(), 0x1p-150, 1e300, -0x1.fffffffp127}) {
    kernel::Kernel k = column_sums(8, 64, 8);
    k.exprs[static_cast<size_t>(k.body[0].body[0].expr)].value = v;  // s0's start
    const std::string text = emit_c(k, "quire_f");
    EXPECT_NE(text.find("double s0 = 0.0;"), std::string::npos) << fmt::format("{:a}", v);
  }
  for (double v : {-0.0, 0.5, 0x1p-149, 0x1.fffffep127, std::numeric_limits<double>::infinity()}) {
    kernel::Kernel k = column_sums(8, 64, 8);
    k.exprs[static_cast<size_t>(k.body[0].body[0].expr)].value = v;
    EXPECT_NE(emit_c(k, "quire_f").find("float s0 = 0.0;"), std::string::npos) << fmt::format("{:a}", v);
  }
}

// A lane loop shorter than four vectors is tiled by the whole vectors it
// has: a tile wider than the loop would leave every iteration to the scalar
// loop after it.
TEST(CEmit, ALaneTileIsNoWiderThanItsLoop) {
  const std::string c = emit_c(column_sums(8, 16, 8), "quire_f");
  EXPECT_NE(c.find("float s0_v[16] = {0};"), std::string::npos) << c;
  EXPECT_NE(c.find("i0_t + 16 <= hi"), std::string::npos) << c;
  EXPECT_NE(emit_c(column_sums(8, 64, 8), "quire_f").find("float s0_v[32] = {0};"), std::string::npos);
}

// In a lane tile, a statement whose lanes read memory a row apart is
// unrolled over the tile (its scalars then registers), and one whose lanes
// read neighbours stays a simd loop.
TEST(CEmit, LanesThatReadWithAStrideAreUnrolledAndNeighboursVectorized) {
  const std::string rows = emit_c(column_sums(64, 40, 8, false, /*of_rows=*/true), "quire_f");
  const std::string fold = "quire_add(s0_v[i0_l], ";
  SCOPED_TRACE(rows);
  const size_t at = rows.find(fold);
  ASSERT_NE(at, std::string::npos);
  const size_t pragma = rows.rfind("#pragma", at);
  EXPECT_EQ(rows.substr(pragma, rows.find('\n', pragma) - pragma), "#pragma GCC unroll 32");
  // The tile's start and its store read nothing a row apart.
  EXPECT_NE(rows.find("#pragma omp simd simdlen(16)"), std::string::npos);
  const std::string columns = emit_c(column_sums(64, 40, 8), "quire_f");
  EXPECT_EQ(columns.find("#pragma GCC unroll"), std::string::npos) << columns;
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
  // And bf16 and f16 from an f32 value, the shortcuts a half site's f32 rounding takes.
  c += fmt::format("    out[{} * n + i] = quire_round_bf16_of_f32(quire_round_f32(x[i]));\n", runtime::kFloatTypeCount);
  c += fmt::format("    out[{} * n + i] = quire_round_f16_of_f32(quire_round_f32(x[i]));\n", runtime::kFloatTypeCount + 1);
  c += "  }\n}\n";
  CCompiler compiler(settings());
  using RoundAll = void (*)(const double*, double*, int64_t);
  const auto round_all = reinterpret_cast<RoundAll>(compiler.load(c, "quire_round_all"));

  std::vector<double> xs = edge_cases();
  const std::vector<double> more = random_doubles(1'000'000);
  xs.insert(xs.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<double> out(static_cast<size_t>(n) * (runtime::kFloatTypeCount + 2));
  round_all(xs.data(), out.data(), n);

  for (int t = 0; t <= runtime::kFloatTypeCount + 1; ++t) {
    const bool of_f32 = t >= runtime::kFloatTypeCount;
    const runtime::FloatType half = t == runtime::kFloatTypeCount ? runtime::FloatType::BF16 : runtime::FloatType::F16;
    const runtime::FloatTypeInfo& f = runtime::kFloatTypes[of_f32 ? static_cast<int>(half) : t];
    int failures = 0;
    for (int64_t i = 0; i < n && failures < 10; ++i) {
      const double x = xs[static_cast<size_t>(i)];
      const double want =
          of_f32 ? runtime::round_to(f.type, runtime::round_to(runtime::FloatType::F32, x)) : runtime::round_to(f.type, x);
      const double got = out[static_cast<size_t>(t * n + i)];
      const bool same = std::isnan(want) ? std::isnan(got) && std::signbit(got) == std::signbit(want)
                                         : std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want);
      if (!same) {
        ++failures;
        ADD_FAILURE() << f.name << (of_f32 ? " of f32" : "") << ": x = " << fmt::format("{:a}", x)
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

// Compiled, the GELU's gradient with its exp beside its erf gives the kernel
// interpreter's bits: over a sweep of the floats (NaN, infinities, |x| past
// the erfc's clamp at 6·√2 and where exp(−x²/2) leaves f32's normal range
// among them), with the vjp's constants, and with a constant that breaks the
// pairing (−¼ for −½), which leaves every block in doubt and the reference's
// to compute.
TEST_F(CEmitCompiled, TheGeluGradientWithItsExpBesideItsErfHasTheInterpretersBits) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 30000; ++i) xs.push_back(normal(rng));
  for (float x : {8.48f, 8.49f, 8.5f, 13.1f, 13.2f, 13.3f, -13.3f, std::numeric_limits<float>::infinity()})
    xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> ct(xs.size());
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : ct) v = u(rng);
  const kernel::Kernel k = gelu_gradient_kernel(n);
  CCompiler compiler(settings());
  using Kernel = void (*)(const void* const*, void*, int64_t, int64_t);
  const auto f = reinterpret_cast<Kernel>(compiler.load(emit_c(k, "quire_f"), "quire_f"));
  for (float minus_half : {-0.5f, -0.25f}) {
    SCOPED_TRACE(minus_half);
    const std::vector<float> constants = {static_cast<float>(M_SQRT1_2), 1.0f, 0.5f, minus_half,
                                          static_cast<float>(0.3989422804014327)};
    std::vector<runtime::Tensor> tensors;
    tensors.push_back(runtime::Tensor::real({n}));
    for (float v : constants) tensors.push_back(runtime::Tensor::real({}, v));
    tensors.push_back(runtime::Tensor::real({n}));
    for (int64_t e = 0; e < n; ++e) {
      tensors[0].reals[static_cast<size_t>(e)] = xs[static_cast<size_t>(e)];
      tensors[6].reals[static_cast<size_t>(e)] = ct[static_cast<size_t>(e)];
    }
    std::vector<const runtime::Tensor*> given;
    for (const runtime::Tensor& t : tensors) given.push_back(&t);
    const runtime::Tensor want = kernel::run_kernel(k, given);
    std::vector<const void*> inputs = {xs.data()};
    for (const float& v : constants) inputs.push_back(&v);
    inputs.push_back(ct.data());
    std::vector<float> out(xs.size());
    f(inputs.data(), out.data(), 0, n);
    int failures = 0;
    for (size_t e = 0; e < xs.size() && failures < 10; ++e) {
      const double w = want.reals.at(e);
      const bool same = std::isnan(w)
                            ? std::isnan(out[e])
                            : std::bit_cast<uint32_t>(out[e]) == std::bit_cast<uint32_t>(static_cast<float>(w));
      if (!same) {
        ++failures;
        ADD_FAILURE() << fmt::format("x = {:a}, ct = {:a}: {:a}, the interpreter's {:a}", xs[e], ct[e], out[e], w);
      }
    }
  }
}

// Compiled, a fold whose accumulators are floats gives the kernel
// interpreter's bits: column sums and row sums (whose lanes read a row
// apart, unrolled) over values whose f32 sums round at every step, signed
// zeros, infinities and NaNs among them, in lane tiles and in the columns or
// rows past the last whole tile.
TEST_F(CEmitCompiled, FloatScalarsKeepTheInterpretersBits) {
  const int64_t rows = 300, cols = 77;
  runtime::Tensor x = runtime::Tensor::real({rows, cols});
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t e = 0; e < rows * cols; ++e)
    x.reals[static_cast<size_t>(e)] =
        static_cast<double>(static_cast<float>(u(rng) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 20)));
  for (int64_t r = 0; r < rows; ++r) {
    x.reals[static_cast<size_t>(r * cols + 3)] = -0.0;
    x.reals[static_cast<size_t>(r * cols + 70)] = -0.0;
  }
  x.reals[static_cast<size_t>(5 * cols + 10)] = std::numeric_limits<double>::infinity();
  x.reals[static_cast<size_t>(9 * cols + 40)] = std::numeric_limits<double>::quiet_NaN();
  CCompiler compiler(settings());
  std::vector<float> in(static_cast<size_t>(rows * cols));
  for (size_t e = 0; e < in.size(); ++e) in[e] = static_cast<float>(x.reals.at(e));
  const void* inputs[] = {in.data()};
  using Kernel = void (*)(const void* const*, void*, int64_t, int64_t);
  for (bool of_rows : {false, true})
    for (bool f64_sums : {false, true}) {
      SCOPED_TRACE(fmt::format("{} sums of the {}", f64_sums ? "f64" : "f32", of_rows ? "rows" : "columns"));
      const kernel::Kernel k = column_sums(rows, cols, 8, f64_sums, of_rows);
      const int64_t sums = of_rows ? rows : cols;
      const runtime::Tensor want = kernel::run_kernel(k, {&x});
      const auto f = reinterpret_cast<Kernel>(compiler.load(emit_c(k, "quire_f"), "quire_f"));
      std::vector<float> out32(static_cast<size_t>(sums));
      std::vector<double> out64(static_cast<size_t>(sums));
      f(inputs, f64_sums ? static_cast<void*>(out64.data()) : static_cast<void*>(out32.data()), 0, sums);
      for (int64_t j = 0; j < sums; ++j) {
        const size_t at = static_cast<size_t>(j);
        const double w = want.reals.at(at);
        const double got = f64_sums ? out64[at] : static_cast<double>(out32[at]);
        if (std::isnan(w))
          EXPECT_TRUE(std::isnan(got)) << j;
        else
          EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(w)) << "column " << j;
      }
    }
}

// out[i, op, t] = round_t(round_f32(a[i] op b[i])) for +, −, ×, ÷ and
// round_t(round_f32(f(a[i]))) for √, negation and |·|, with t f32, bf16 and
// f16: the f32 site of a kernel over f32 values.
kernel::Kernel f32_arithmetic(int64_t n) {
  KernelBuilder b("f32 arithmetic");
  const int a = b.buffer(ElemType::F32, {n});
  const int c = b.buffer(ElemType::F32, {n});
  const std::vector<runtime::FloatType> targets = {FloatType::F32, FloatType::BF16, FloatType::F16};
  const int64_t ops = 7, width = ops * static_cast<int64_t>(targets.size());
  const int out = b.buffer(ElemType::F32, {n, width});
  const int i = b.new_loop_var();
  std::vector<Stmt> body;
  const int x = b.load(a, Affine{0, {{i, 1}}}), y = b.load(c, Affine{0, {{i, 1}}});
  const std::vector<int> values = {b.binary(runtime::BinaryOp::Add, x, y), b.binary(runtime::BinaryOp::Sub, x, y),
                                   b.binary(runtime::BinaryOp::Mul, x, y), b.binary(runtime::BinaryOp::Div, x, y),
                                   b.unary(runtime::UnaryOp::Sqrt, x),     b.unary(runtime::UnaryOp::Neg, y),
                                   b.unary(runtime::UnaryOp::Abs, y)};
  for (size_t t = 0; t < targets.size(); ++t)
    for (size_t op = 0; op < values.size(); ++op) {
      const int rounded = b.round(targets[t], b.round(FloatType::F32, values[op]));
      body.push_back(kernel::store_stmt(out, Affine{static_cast<int64_t>(t * values.size() + op), {{i, width}}}, rounded));
    }
  Stmt loop = kernel::loop_stmt(i, n, std::move(body), /*independent=*/true);
  loop.lanes = 8;
  b.kernel().body.push_back(std::move(loop));
  return b.take();
}

// The float operations an f32 site computes in (FunctionWriter::float_site)
// give the interpreter's bits, which compute in f64 and round: over every
// format's edge cases and a million random f32 values, paired.
TEST_F(CEmitCompiled, FloatArithmeticOfF32SitesHasTheInterpretersBits) {
  std::vector<double> xs = edge_cases();
  const std::vector<double> more = random_doubles(200'000);
  xs.insert(xs.end(), more.begin(), more.end());
  for (double& x : xs) x = static_cast<double>(static_cast<float>(x));
  const int64_t n = static_cast<int64_t>(xs.size());
  runtime::Tensor a = runtime::Tensor::real({n}), c = runtime::Tensor::real({n});
  std::vector<float> a32(static_cast<size_t>(n)), c32(static_cast<size_t>(n));
  std::mt19937_64 rng(11);
  for (size_t e = 0; e < xs.size(); ++e) {
    a.reals[e] = xs[e];
    c.reals[e] = xs[rng() % xs.size()];
    a32[e] = static_cast<float>(a.reals[e]);
    c32[e] = static_cast<float>(c.reals[e]);
  }
  const kernel::Kernel k = f32_arithmetic(n);
  const std::string text = emit_c(k, "quire_f");
  EXPECT_NE(text.find("const float t2 = t0 + t1;"), std::string::npos) << text;
  EXPECT_NE(text.find(" = sqrtf(t"), std::string::npos) << text;
  EXPECT_NE(text.find("quire_round_bf16_of_f32f("), std::string::npos) << text;

  const runtime::Tensor want = kernel::run_kernel(k, {&a, &c});
  CCompiler compiler(settings());
  using Fn = void (*)(const void* const*, void*, int64_t, int64_t);
  const auto f = reinterpret_cast<Fn>(compiler.load(text, "quire_f"));
  std::vector<float> got(want.reals.size());
  const void* inputs[] = {a32.data(), c32.data()};
  f(inputs, got.data(), 0, n);
  int failures = 0;
  for (size_t e = 0; e < got.size() && failures < 10; ++e) {
    const double w = want.reals[e], g = static_cast<double>(got[e]);
    const bool same = std::isnan(w) ? std::isnan(g) && std::signbit(g) == std::signbit(w)
                                    : std::bit_cast<uint64_t>(g) == std::bit_cast<uint64_t>(w);
    if (!same) {
      ++failures;
      const size_t i = e / 21;
      ADD_FAILURE() << fmt::format("element {} (column {}): a = {:a}, b = {:a}: {:a}, the interpreter {:a}", i, e % 21,
                                   a.reals[i], c.reals[i], g, w);
    }
  }
}

}  // namespace
}  // namespace quire::native
