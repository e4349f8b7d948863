// The native runner against the kernel interpreter, bit for bit: every
// expression kind and operation on hard inputs, the tutorial's loss under
// every policy through the kernel engine, the object cache, and the errors.
#include "quire/native/native_runner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "quire/elab/elab_testing.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/layout.h"
#include "quire/native/c_emit.h"
#include "quire/native/native_testing.h"
#include "quire/realize/realization.h"
#include "quire/runtime/elementary.h"
#include "quire/runtime/runtime_error.h"

namespace quire::native {
namespace {

using kernel::Affine;
using kernel::ElemType;
using kernel::Kernel;
using kernel::KernelBuilder;
using kernel::Stmt;
using kernel::StmtKind;
using runtime::BinaryOp;
using runtime::Tensor;
using runtime::UnaryOp;

using testing::ScopedEnv;

class NativeRunnerTest : public testing::FreshCacheTest {};

/// Equal kinds, shapes and elements; reals bit for bit, except that a NaN
/// need only meet a NaN (payloads are not part of the semantics).
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.kind, want.kind) << what;
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.ints, want.ints) << what;
  ASSERT_EQ(got.reals.size(), want.reals.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.reals.size() && failures < 10; ++i) {
    const double g = got.reals[i], w = want.reals[i];
    if (std::isnan(w) ? std::isnan(g) : std::bit_cast<uint64_t>(g) == std::bit_cast<uint64_t>(w)) continue;
    ++failures;
    ADD_FAILURE() << what << " element " << i << fmt::format(": native {:a}, interpreter {:a}", g, w);
  }
}

/// Runs `k` natively and in the interpreter and compares the two.
void expect_native_matches(NativeRunner& runner, int id, const Kernel& k, const std::vector<const Tensor*>& inputs) {
  runner.add(id, k);
  expect_same_bits(runner.run(id, k, inputs), kernel::run_kernel(k, inputs), k.title);
}

// The hard values: NaNs of both signs, infinities, signed zeros, subnormals,
// the extremes, and the ordinary.
std::vector<double> hard_values() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {nan,     -nan,  inf,    -inf, 0.0, -0.0,  1.0,    -1.0, 0.5,  2.0,   -2.5,  3.0,     1e-310,
          -1e-310, 1e300, -1e300, 1e-5, 0.1, 710.0, -745.5, 1e20, M_PI, -3.75, 1e-20, 65504.0, 7.0};
}

/// A statement-building helper: nested loops and stores on a KernelBuilder.
struct Nest {
  KernelBuilder b;
  explicit Nest(std::string title) : b(std::move(title)) {}

  static Stmt loop(int var, int64_t extent, std::vector<Stmt> body) {
    return kernel::loop_stmt(var, extent, std::move(body));
  }
  static Stmt store(int buffer, Affine index, int expr) { return kernel::store_stmt(buffer, std::move(index), expr); }
  static Stmt set(int scalar, int expr) { return kernel::set_stmt(scalar, expr); }
  /// An expression node the builder will not make (a round to f64 or an fp8 type).
  int raw_round(runtime::FloatType t, int a) {
    kernel::Expr e;
    e.kind = kernel::ExprKind::Round;
    e.type = t;
    e.a = a;
    b.kernel().exprs.push_back(e);
    return static_cast<int>(b.kernel().exprs.size()) - 1;
  }
};

TEST_F(NativeRunnerTest, EveryUnaryOpOnRealsIntsAndBools) {
  const std::vector<double> xs = hard_values();
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<int64_t> ints = {0, 1, -1, 7, -123456789, int64_t{1} << 40, -(int64_t{1} << 53)};
  const std::vector<int64_t> bools = {0, 1};
  const int64_t ni = static_cast<int64_t>(ints.size()), nb = static_cast<int64_t>(bools.size());
  const int64_t row = n + ni + nb;
  const int ops = static_cast<int>(UnaryOp::Not) + 1;

  // out[op, :] = op over x, then over the ints, then over the bools.
  Nest nest("every unary");
  KernelBuilder& b = nest.b;
  const int x = b.buffer(ElemType::F64, {n});
  const int in = b.buffer(ElemType::I64, {ni});
  const int bo = b.buffer(ElemType::Bool, {nb});
  const int out = b.buffer(ElemType::F64, {ops, row});
  const int i = b.new_loop_var();
  for (int op = 0; op < ops; ++op) {
    const auto u = static_cast<UnaryOp>(op);
    int offset = static_cast<int>(op * row);
    for (auto [buffer, extent] : {std::pair{x, n}, std::pair{in, ni}, std::pair{bo, nb}}) {
      const int v = b.unary(u, b.load(buffer, Affine{0, {{i, 1}}}));
      b.kernel().body.push_back(Nest::loop(i, extent, {Nest::store(out, Affine{offset, {{i, 1}}}, v)}));
      offset += static_cast<int>(extent);
    }
  }
  Tensor tx = Tensor::real({n});
  tx.reals = xs;
  Tensor ti = Tensor::integer(runtime::ElemKind::I64, {ni});
  ti.ints = ints;
  Tensor tb = Tensor::integer(runtime::ElemKind::Bool, {nb});
  tb.ints = bools;
  NativeRunner runner;
  expect_native_matches(runner, 0, b.take(), {&tx, &ti, &tb});
}

TEST_F(NativeRunnerTest, EveryBinaryOpOnEveryPairOfHardValues) {
  const std::vector<double> xs = hard_values();
  const int64_t n = static_cast<int64_t>(xs.size());
  const int ops = static_cast<int>(BinaryOp::Or) + 1;
  // out[op, i, j] = x[i] op x[j].
  Nest nest("every binary");
  KernelBuilder& b = nest.b;
  const int x = b.buffer(ElemType::F64, {n});
  const int out = b.buffer(ElemType::F64, {ops, n, n});
  const int i = b.new_loop_var();
  const int j = b.new_loop_var();
  std::vector<Stmt> inner;
  for (int op = 0; op < ops; ++op) {
    const int v = b.binary(static_cast<BinaryOp>(op), b.load(x, Affine{0, {{i, 1}}}), b.load(x, Affine{0, {{j, 1}}}));
    inner.push_back(Nest::store(out, Affine{op * n * n, {{i, n}, {j, 1}}}, v));
  }
  b.kernel().body.push_back(Nest::loop(i, n, {Nest::loop(j, n, std::move(inner))}));
  Tensor tx = Tensor::real({n});
  tx.reals = xs;
  NativeRunner runner;
  expect_native_matches(runner, 0, b.take(), {&tx});
}

TEST_F(NativeRunnerTest, EveryExpressionKindAndRounding) {
  const std::vector<double> xs = hard_values();
  const int64_t n = static_cast<int64_t>(xs.size());
  const int64_t kinds = 12;
  // out[i, :] = const, where, fma, finite, the six roundings, a scalar's
  // running fma sum, and a where whose sides share a subexpression with its condition.
  Nest nest("every expression");
  KernelBuilder& b = nest.b;
  const int x = b.buffer(ElemType::F64, {n});
  const int c = b.buffer(ElemType::Bool, {n});
  const int out = b.buffer(ElemType::F64, {n, kinds});
  const int i = b.new_loop_var();
  const int s = b.new_scalar();
  const int xi = b.load(x, Affine{0, {{i, 1}}});
  const int xr = b.load(x, Affine{n - 1, {{i, -1}}});  // x reversed: a negative coefficient
  const int ci = b.load(c, Affine{0, {{i, 1}}});
  std::vector<int> values = {
      b.constant(-0x1.23456789abcdep-1000),
      b.where(ci, xi, xr),
      b.fma(xi, xr, b.constant(0.1)),
      b.finite(xi),
      nest.raw_round(runtime::FloatType::F64, xi),
      b.round(runtime::FloatType::F32, xi),
      b.round(runtime::FloatType::BF16, b.binary(BinaryOp::Mul, xi, xr)),
      b.round(runtime::FloatType::F16, xi),
      nest.raw_round(runtime::FloatType::FP8E4M3, xi),
      nest.raw_round(runtime::FloatType::FP8E5M2, xi),
  };
  const int shared = b.unary(UnaryOp::Exp, xi);
  values.push_back(b.where(b.binary(BinaryOp::Gt, shared, b.constant(1.0)), shared, b.unary(UnaryOp::Neg, shared)));
  std::vector<Stmt> body;
  for (size_t k = 0; k < values.size(); ++k)
    body.push_back(Nest::store(out, Affine{static_cast<int64_t>(k), {{i, kinds}}}, values[k]));
  body.push_back(Nest::set(s, b.fma(xi, b.constant(3.0), b.scalar(s))));
  body.push_back(Nest::store(out, Affine{kinds - 1, {{i, kinds}}}, b.scalar(s)));
  b.kernel().body.push_back(Nest::loop(i, n, std::move(body)));

  Tensor tx = Tensor::real({n});
  tx.reals = xs;
  Tensor tc = Tensor::integer(runtime::ElemKind::Bool, {n});
  for (int64_t k = 0; k < n; ++k) tc.ints[static_cast<size_t>(k)] = k % 3 == 0;
  NativeRunner runner;
  expect_native_matches(runner, 0, b.take(), {&tx, &tc});
}

// out[i, j] = f32 Σ_k a[i, k] · b[k, j] over [rows, cols] with `depth` terms,
// lanes on j (a loop around a fold: emitted as lane tiles), the product and
// the sum rounded apart; `split` on i.
// With `rows` 0 the loop over j is the kernel's only statement: the split
// loop itself, whose tiles then run within each thread's [lo, hi).
Kernel lane_tiled_product(int64_t rows, int64_t cols, int64_t depth, int lanes, int split) {
  Nest nest("dot");
  KernelBuilder& b = nest.b;
  const int a = b.buffer(ElemType::F32, {std::max<int64_t>(rows, 1), depth});
  const int w = b.buffer(ElemType::F32, {depth, cols});
  const int out = b.buffer(ElemType::F32, {std::max<int64_t>(rows, 1), cols});
  const int i = b.new_loop_var(), j = b.new_loop_var(), k = b.new_loop_var();
  const int s = b.new_scalar();
  const Affine a_at = rows == 0 ? Affine{0, {{k, 1}}} : Affine{0, {{i, depth}, {k, 1}}};
  const Affine out_at = rows == 0 ? Affine{0, {{j, 1}}} : Affine{0, {{i, cols}, {j, 1}}};
  const int term = b.round(runtime::FloatType::F32, b.binary(BinaryOp::Mul, b.load(a, a_at),
                                                             b.load(w, Affine{0, {{k, cols}, {j, 1}}})));
  Stmt fold = Nest::loop(k, depth, {Nest::set(s, b.round(runtime::FloatType::F32, b.binary(BinaryOp::Add, b.scalar(s), term)))});
  Stmt across = Nest::loop(j, cols, {Nest::set(s, b.constant(0.0)), fold, Nest::store(out, out_at, b.scalar(s))});
  across.independent = true;
  across.lanes = lanes;
  Stmt down = Nest::loop(i, rows, {across});
  down.independent = true;
  b.kernel().body.push_back(rows == 0 ? across : down);
  b.kernel().split = split;
  return b.take();
}

TEST_F(NativeRunnerTest, LaneTilesAroundAFoldKeepEachElementsChain) {
  // Columns that fill no tile, one tile and a remainder, several tiles;
  // special values among the operands; split over 2 threads and not.
  NativeRunner runner;
  runner.set_threads(2);
  int id = 0;
  for (int64_t rows : {7, 0})
  for (int64_t cols : {5, 37, 100})
    for (int split : {1, 2}) {
      const int64_t depth = 13;
      const Kernel k = lane_tiled_product(rows, cols, depth, 8, split);
      const std::string c = emit_c(k);
      if (cols >= 32) {
        EXPECT_NE(c.find("s0_v[i1_l]"), std::string::npos) << c;
      }
      Tensor ta = Tensor::real({std::max<int64_t>(rows, 1), depth}), tw = Tensor::real({depth, cols});
      const std::vector<double> hard = hard_values();
      for (size_t n = 0; n < ta.reals.size(); ++n) ta.reals[n] = static_cast<float>(hard[n % hard.size()]);
      for (size_t n = 0; n < tw.reals.size(); ++n) tw.reals[n] = static_cast<float>(0.37 * static_cast<double>(n % 11) - 1.5);
      SCOPED_TRACE(fmt::format("{} rows, {} columns, split {}", rows, cols, split));
      expect_native_matches(runner, id++, k, {&ta, &tw});
    }
}

TEST_F(NativeRunnerTest, RoundingsSideBySideAreEachRounded) {
  // Four independent f32(tanh(x)) in straight-line code, as a tile's copies
  // are: GCC 12.2's SLP vectorizer, under -march=native, dropped the f32
  // round trip of such a group (c_compiler.cpp's flags).
  Nest nest("four roundings");
  const int x = nest.b.buffer(ElemType::F64, {4});
  const int out = nest.b.buffer(ElemType::F64, {4});
  for (int64_t e = 0; e < 4; ++e)
    nest.b.kernel().body.push_back(Nest::set(
        nest.b.new_scalar(),
        nest.b.round(runtime::FloatType::F32, nest.b.unary(UnaryOp::Tanh, nest.b.load(x, Affine{e, {}})))));
  for (int64_t e = 0; e < 4; ++e)
    nest.b.kernel().body.push_back(Nest::store(out, Affine{e, {}}, nest.b.scalar(static_cast<int>(e))));
  const Kernel k = nest.b.take();
  Tensor tx = Tensor::real({4});
  tx.reals = {0.3, 0.7, 1.1, 20.0};
  NativeRunner runner;
  expect_native_matches(runner, 0, k, {&tx});
  const Tensor got = runner.run(0, k, {&tx});
  for (size_t e = 0; e < 4; ++e)
    EXPECT_EQ(got.reals[e], static_cast<double>(static_cast<float>(std::tanh(tx.reals[e])))) << e;
}

TEST_F(NativeRunnerTest, ExpAndErfInVectorizedLoopsHaveTheReferencesBits) {
  // The kernel's C includes elementary.inc as the reference compiles it:
  // over every range of both (and with lanes, so that the vectorized code is
  // what runs), the compiled functions give runtime::elementary_exp's and
  // elementary_erf's bits.
  std::vector<double> xs;
  for (int i = 0; i < 40000; ++i) xs.push_back(-760.0 + 1480.0 * i / 40000.0);  // exp's whole range
  for (int i = 0; i < 40000; ++i) xs.push_back(-7.0 + 14.0 * i / 40000.0);      // erf's four ranges
  for (int e = -1074; e < 4; e += 3) xs.push_back(std::ldexp(1.3, e));
  for (double x : hard_values()) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Erf}) {
    Nest nest(runtime::op_name(op));
    const int x = nest.b.buffer(ElemType::F64, {n});
    const int out = nest.b.buffer(ElemType::F64, {n});
    const int i = nest.b.new_loop_var();
    Stmt loop = Nest::loop(
        i, n, {Nest::store(out, Affine{0, {{i, 1}}}, nest.b.unary(op, nest.b.load(x, Affine{0, {{i, 1}}})))});
    loop.independent = true;
    nest.b.kernel().body.push_back(loop);
    Kernel k = nest.b.take();
    kernel::apply_layout(k, kernel::Layout{8, 1});
    Tensor tx = Tensor::real({n});
    tx.reals = xs;
    NativeRunner runner;
    runner.add(0, k);
    const Tensor got = runner.run(0, k, {&tx});
    int failures = 0;
    for (size_t j = 0; j < xs.size() && failures < 10; ++j) {
      const double want = op == UnaryOp::Exp ? runtime::elementary_exp(xs[j]) : runtime::elementary_erf(xs[j]);
      if (std::isnan(want) ? std::isnan(got.reals[j])
                           : std::bit_cast<uint64_t>(got.reals[j]) == std::bit_cast<uint64_t>(want))
        continue;
      ++failures;
      ADD_FAILURE() << runtime::op_name(op)
                    << fmt::format("({:a}): native {:a}, reference {:a}", xs[j], got.reals[j], want);
    }
  }
}

TEST_F(NativeRunnerTest, AnF32KernelReadsAndWritesTheF32View) {
  // x · 0.5 rounded to f32, on f32 buffers: the input's f32 view is made for
  // the kernel (and kept), and the output is held as f32 alone.
  Nest nest("half");
  const int x = nest.b.buffer(ElemType::F32, {5});
  const int out = nest.b.buffer(ElemType::F32, {5});
  const int i = nest.b.new_loop_var();
  const int v = nest.b.round(runtime::FloatType::F32,
                             nest.b.binary(BinaryOp::Mul, nest.b.load(x, Affine{0, {{i, 1}}}), nest.b.constant(0.5)));
  nest.b.kernel().body.push_back(Nest::loop(i, 5, {Nest::store(out, Affine{0, {{i, 1}}}, v)}));
  const Kernel k = nest.b.take();
  Tensor tx = Tensor::real({5});
  const double small = static_cast<float>(3.0e-30);  // inputs are f32 numbers, as an f32 buffer's are
  tx.reals = {1.5, -0.0, 0x1p-149, small, 0x1.fffffep127};
  ASSERT_FALSE(tx.reals.holds_narrow());
  NativeRunner runner;
  expect_native_matches(runner, 0, k, {&tx});
  EXPECT_TRUE(tx.reals.holds_narrow()) << "the kernel read the input's f32 view";
  const Tensor got = runner.run(0, k, {&tx});
  EXPECT_TRUE(got.reals.holds_narrow());
  EXPECT_FALSE(got.reals.holds_wide()) << "an f32 output is held as f32 alone";
  EXPECT_EQ(got.reals, (std::vector<double>{0.75, -0.0, 0.0, small / 2, 0x1.fffffep126}));
}

TEST_F(NativeRunnerTest, StoresIntoEveryBufferTypeAndAccumulateInTheOutput) {
  const std::vector<double> xs = {0.1, -2.75, 3.0, 1e-6, -0.0, 65519.0, 70000.0, 1e-8, 12345.678};
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor tx = Tensor::real({n});
  tx.reals = xs;
  NativeRunner runner;
  int id = 0;
  for (ElemType t :
       {ElemType::F64, ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::I32, ElemType::I64, ElemType::Bool}) {
    // Three passes of out[i] = round(out[i] + x[i] * 2.5): the output is read back as it is written.
    Nest nest(fmt::format("accumulate into {}", kernel::elem_type_name(t)));
    KernelBuilder& b = nest.b;
    const int x = b.buffer(ElemType::F64, {n});
    const int out = b.buffer(t, {n});
    const int pass = b.new_loop_var();
    const int i = b.new_loop_var();
    int v = b.binary(BinaryOp::Add, b.load(out, Affine{0, {{i, 1}}}),
                     b.binary(BinaryOp::Mul, b.load(x, Affine{0, {{i, 1}}}), b.constant(2.5)));
    if (kernel::is_float(t)) v = b.round(kernel::float_of(t), v);
    b.kernel().body.push_back(Nest::loop(pass, 3, {Nest::loop(i, n, {Nest::store(out, Affine{0, {{i, 1}}}, v)})}));
    expect_native_matches(runner, id++, b.take(), {&tx});
  }
  EXPECT_EQ(runner.compilations(), id);
}

TEST_F(NativeRunnerTest, InputsAreCheckedAsTheInterpreterChecksThem) {
  Nest nest("checked");
  const int x = nest.b.buffer(ElemType::F64, {2});
  const int out = nest.b.buffer(ElemType::F64, {});
  nest.b.kernel().body.push_back(Nest::store(out, Affine{}, nest.b.load(x, Affine{1, {}})));
  const Kernel k = nest.b.take();
  NativeRunner runner;
  const Tensor wrong_shape = Tensor::real({3});
  const Tensor wrong_kind = Tensor::integer(runtime::ElemKind::I64, {2});
  EXPECT_THROW(runner.run(0, k, {&wrong_shape}), runtime::KernelMisuse);
  EXPECT_THROW(runner.run(0, k, {&wrong_kind}), runtime::KernelMisuse);
  EXPECT_THROW(runner.run(0, k, {}), runtime::KernelMisuse);
  Tensor right = Tensor::real({2});
  right.reals = {1.0, 2.0};
  EXPECT_EQ(runner.run(0, k, {&right}).reals, std::vector<double>{2.0});
}

// ---------------------------------------------------------------------------
// The tutorial through the kernel engine

struct TutorialRun {
  double plain = 0;    ///< the reference interpreter, no launcher
  double kernels = 0;  ///< the kernel engine with the kernel interpreter
  double native = 0;   ///< the kernel engine with the native runner
  std::vector<Kernel> launched;
};

TutorialRun run_tutorial(precision::Policy policy, NativeRunner& runner) {
  auto e = elab::testing::elaborate_tutorial();
  EXPECT_TRUE(e->ok()) << e->rendered();
  const elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims{{"B", 4}};
  const int entry = prog.find_function("loss");
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  precision::RealizeOptions options;
  options.policy = policy;
  const precision::Realization r = precision::realize(prog, entry, options, dims);
  const interp::ParamMap params = interp::init_params(prog, fn.args[0].type.params, 0, dims);
  const std::vector<interp::Value> args = interp::entry_arguments(prog, entry, &params, dims, 0, std::nullopt);

  TutorialRun run;
  run.plain = interp::Interpreter(prog, dims, &r).call(entry, args).tensor.reals.at(0);
  kernel::InterpretingRunner interpreting;
  kernel::KernelEngine reference(prog, entry, dims, options.half_intermediates, interpreting);
  interp::Interpreter with_kernels(prog, dims, &r);
  with_kernels.set_launcher(&reference);
  run.kernels = with_kernels.call(entry, args).tensor.reals.at(0);
  kernel::KernelEngine engine(prog, entry, dims, options.half_intermediates, runner);
  interp::Interpreter with_native(prog, dims, &r);
  with_native.set_launcher(&engine);
  run.native = with_native.call(entry, args).tensor.reals.at(0);
  EXPECT_GT(engine.kernel_launches(), 0);
  for (const kernel::KernelRecord& rec : engine.kernels()) run.launched.push_back(rec.kernel);
  return run;
}

TEST_F(NativeRunnerTest, TutorialLossMatchesTheInterpreterUnderEveryPolicy) {
  for (precision::Policy policy :
       {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16, precision::Policy::F16}) {
    SCOPED_TRACE(precision::policy_name(policy));
    NativeRunner runner;
    const TutorialRun run = run_tutorial(policy, runner);
    EXPECT_EQ(std::bit_cast<uint64_t>(run.native), std::bit_cast<uint64_t>(run.kernels))
        << fmt::format("native {:a}, kernel interpreter {:a}", run.native, run.kernels);
    EXPECT_EQ(std::bit_cast<uint64_t>(run.native), std::bit_cast<uint64_t>(run.plain))
        << fmt::format("native {:a}, reference interpreter {:a}", run.native, run.plain);
    EXPECT_EQ(runner.compilations() + runner.cache_hits(), static_cast<int64_t>(run.launched.size()));
  }
}

TEST_F(NativeRunnerTest, ASecondRunnerCompilesNothing) {
  NativeRunner first;
  const TutorialRun run = run_tutorial(precision::Policy::BF16, first);
  ASSERT_GT(first.compilations(), 0);
  NativeRunner second;
  for (size_t id = 0; id < run.launched.size(); ++id) second.add(static_cast<int>(id), run.launched[id]);
  EXPECT_EQ(second.compilations(), 0);
  EXPECT_EQ(second.cache_hits(), static_cast<int64_t>(run.launched.size()));
}

// ---------------------------------------------------------------------------
// Errors

Kernel small_kernel() {
  Nest nest("small");
  const int out = nest.b.buffer(ElemType::F64, {});
  nest.b.kernel().body.push_back(Nest::store(out, Affine{}, nest.b.constant(1.0)));
  return nest.b.take();
}

std::string native_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const NativeError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no NativeError";
  return "";
}

TEST_F(NativeRunnerTest, AMissingCompilerIsNamed) {
  ScopedEnv cc("CC", "/nonexistent/cc");
  const std::string message = native_error([] { NativeRunner().add(0, small_kernel()); });
  EXPECT_NE(message.find("no C compiler"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/cc"), std::string::npos) << message;
}

TEST_F(NativeRunnerTest, AnUncreatableCacheDirectoryIsNamed) {
  const std::string file = dir_ + "/a-file";
  std::ofstream(file) << "not a directory";
  ScopedEnv cache("QUIRE_CACHE_DIR", file + "/cache");
  const std::string message = native_error([] { NativeRunner().add(0, small_kernel()); });
  EXPECT_NE(message.find(file + "/cache"), std::string::npos) << message;
  EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
}

TEST_F(NativeRunnerTest, AFailedCompileQuotesTheCompilerAndKeepsTheSource) {
  CCompiler compiler;
  const std::string message = native_error([&] { compiler.load("this is not C;\n", "f"); });
  EXPECT_NE(message.find("exit status"), std::string::npos) << message;
  EXPECT_NE(message.find("error"), std::string::npos) << message;
  const size_t at = message.find(dir_);
  ASSERT_NE(at, std::string::npos) << message;
  const std::string kept = message.substr(at, message.find(':', at) - at);
  EXPECT_TRUE(std::filesystem::exists(kept)) << kept;
}

TEST_F(NativeRunnerTest, AMissingSymbolReportsDlerror) {
  CCompiler compiler;
  const std::string message = native_error([&] { compiler.load("void present(void) {}\n", "absent"); });
  EXPECT_NE(message.find("absent"), std::string::npos) << message;
  EXPECT_NE(message.find("undefined symbol"), std::string::npos) << message;
}

}  // namespace
}  // namespace quire::native
