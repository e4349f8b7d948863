// The kernel backend (the engine running lowered kernels through the kernel
// interpreter) against the reference interpreter: the same bits for every
// function of the tutorial under every policy, for its training step under
// both remat modes, and for hand-written programs that cover every operation
// the lowering takes, special values included; what it does not lower runs
// on the reference kernels and is counted.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <algorithm>

#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/kernel/engine.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/kernel_testing.h"

namespace quire::kernel {
namespace {

using interp::Value;
using precision::Policy;
using testing::drawn_arguments;
using testing::every_policy;
using testing::expect_same;
using testing::label;
using testing::Runs;

Runs run_both(const elab::Program& prog, int fn, const std::vector<Value>& args,
              const std::map<std::string, int64_t>& dims, const precision::RealizeOptions& options,
              interp::Remat remat = interp::Remat::Recompute) {
  InterpretingRunner runner;
  return testing::run_both(prog, fn, args, dims, options, runner, remat);
}

TEST(KernelBackend, EveryTutorialFunctionUnderEveryPolicyHasTheReferenceBits) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  const elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims = {{"B", 4}};
  std::set<std::string> ran;
  for (size_t fn = 0; fn < prog.functions.size(); ++fn) {
    const core::Function& f = prog.functions[fn];
    if (!f.checked || f.result_value == 0) continue;
    std::vector<Value> args;
    try {
      args = drawn_arguments(prog, static_cast<int>(fn), dims);
    } catch (const std::exception&) {
      continue;  // not an entry `quire run` can call (its arguments have `...` axes): its callers cover it
    }
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(f.name + " under " + label(o));
      const Runs r = run_both(prog, static_cast<int>(fn), args, dims, o);
      expect_same(r.kernels, r.reference, "result");
      EXPECT_GT(r.kernel_launches, 0);
      EXPECT_EQ(r.runtime_launches, 0) << "every launch of the tutorial's forward has a kernel";
    }
    ran.insert(f.name);
  }
  // The others take `...` axes; loss reaches every one of them.
  EXPECT_TRUE(ran.count("loss")) << ran.size();
}

TEST(KernelBackend, OneCallOfTheTutorialLossLaunchesWhatFusionCounts) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok());
  const elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims = {{"B", 4}};
  const int fn = prog.find_function("loss");
  precision::RealizeOptions o;
  o.policy = Policy::F32;
  const Runs r = run_both(prog, fn, drawn_arguments(prog, fn, dims), dims, o);
  const Fusion f = fuse(prog, fn, dims);
  ASSERT_TRUE(f.fused_launches.has_value());
  EXPECT_EQ(r.kernel_launches, *f.fused_launches);  // 24: 35 launches without fusion
}

TEST(KernelBackend, TheTrainingStepHasTheReferenceBitsUnderBothRematModes) {
  const testing::TutorialStep t;
  for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store})
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(label(o) + " --remat " + interp::remat_name(remat));
      const Runs r = run_both(t.prog(), t.step, t.step_args, t.dims, o, remat);
      expect_same(r.kernels, r.reference, "step");
      EXPECT_GT(r.kernel_launches, 0);
    }
}

TEST(KernelBackend, EveryLoweredOperationHasTheReferenceBitsOnSpecialValues) {
  interp::testing::Program p(testing::kOperations);
  const elab::Program& prog = p.prog();
  const auto calls = testing::operation_calls();
  for (const auto& [name, tensors] : calls) {
    std::vector<Value> args;
    for (const runtime::Tensor& t : tensors) args.push_back(Value::of(t));
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(name + " under " + label(o));
      const Runs r = run_both(prog, p.index(name), args, p.dims, o);
      expect_same(r.kernels, r.reference, "result");
      // Integer arithmetic alone has no kernel: its group (`i * i`, then `+`) runs on the reference kernels.
      EXPECT_EQ(r.kernel_launches > 0, name != "int_arith");
      EXPECT_EQ(r.runtime_launches, name == "int_arith" ? 2 : 0);
    }
  }
}

// A kernel writes `inf` and `nan` literals by their bits: a masked exp is
// exactly 0 where the mask fills −∞, and a NaN literal propagates, as the
// reference computes them, under every policy.
TEST(KernelBackend, InfAndNanLiteralsRunAsTheReferenceDoes) {
  interp::testing::Program p(R"(fn masked(x : ℝ[n: 4]) -> ℝ[n: 4] = exp(where(x > 0, x, -inf))
fn missing(x : ℝ[n: 4]) -> ℝ[n: 4] = x * 0 + nan
)");
  const std::vector<Value> args = {Value::of(interp::testing::reals({4}, {0.5, -1, 2, -0.25}))};
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    const Runs m = run_both(p.prog(), p.index("masked"), args, p.dims, o);
    expect_same(m.kernels, m.reference, "masked");
    EXPECT_GT(m.kernel_launches, 0);
    EXPECT_EQ(m.kernels.tensor.reals[1], 0.0);
    EXPECT_EQ(m.kernels.tensor.reals[3], 0.0);
    EXPECT_GT(m.kernels.tensor.reals[0], 1.0);
    const Runs n = run_both(p.prog(), p.index("missing"), args, p.dims, o);
    expect_same(n.kernels, n.reference, "missing");
    for (double v : n.kernels.tensor.reals) EXPECT_TRUE(std::isnan(v));
  }
}

// iota's positions build a causal mask (the prelude's causal_mask): under
// every policy the kernels give the reference's bits, and a softmax over the
// masked scores is exactly 0 above the diagonal.
TEST(KernelBackend, ACausalMaskFromIotaRunsAsTheReferenceDoes) {
  interp::testing::Program p(R"(fn attend(x : ℝ[h: 2, q: 5, k: 5]) -> ℝ[h: 2, q: 5, k: 5] = softmax(causal_mask(x))
fn positions(x : ℝ[t: 7]) -> ℝ[t: 7] = x + (iota(t: 7) as ℝ)
)");
  std::vector<double> xs;
  for (int i = 0; i < 50; ++i) xs.push_back(std::sin(1.7 * i) * 3);
  const std::vector<Value> scores = {Value::of(interp::testing::reals({2, 5, 5}, xs))};
  const std::vector<Value> zeros = {Value::of(interp::testing::reals({7}, std::vector<double>(7, 0.0)))};
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    const Runs a = run_both(p.prog(), p.index("attend"), scores, p.dims, o);
    expect_same(a.kernels, a.reference, "attend");
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 5; ++q)
        for (int k = q + 1; k < 5; ++k) EXPECT_EQ(a.kernels.tensor.reals[static_cast<size_t>((h * 5 + q) * 5 + k)], 0.0);
    const Runs n = run_both(p.prog(), p.index("positions"), zeros, p.dims, o);
    expect_same(n.kernels, n.reference, "positions");
    for (int i = 0; i < 7; ++i) EXPECT_EQ(n.kernels.tensor.reals[static_cast<size_t>(i)], i);
  }
}

TEST(KernelBackend, AStackWithAMaskAndAKeyRunsAsTheReferenceDoes) {
  // Dropout inside each block: the mask and the key reach every copy, the
  // key as copy_key(k, i); forward and gradient.
  interp::testing::Program p(R"(module C {
  param w : ℝ[m: 8]  init = normal(1.0)
  fn apply(x : ℝ[b: 3, m: 8], keep : bool[m: 8], k : key) -> ℝ[b: 3, m: 8] =
    let drop = bernoulli(k, 0.75, b: 3, m: 8)
    where(keep, tanh(x * w), x) + where(drop, x / 0.75, 0.0)
}
module S {
  use cs : stack{4}(C)
  fn apply(x : ℝ[b: 3, m: 8], keep : bool[m: 8], k : key) -> ℝ[b: 3, m: 8] = cs.apply(x, keep, k)
}
fn loss(θ : params S, x : ℝ[b: 3, m: 8], keep : bool[m: 8], k : key) -> ℝ[] = sum(S.apply(θ, x, keep, k) ^ 2)
fn step(θ : params S, x : ℝ[b: 3, m: 8], keep : bool[m: 8], k : key) -> (ℝ[], params S) =
  value_and_grad(loss)(θ, x, keep, k)
)");
  std::vector<double> xs;
  for (int i = 0; i < 24; ++i) xs.push_back(std::sin(0.9 * i) * 2);
  const std::vector<Value> args = {
      interp::testing::tree(p.params("S", 3)), Value::of(interp::testing::reals({3, 8}, xs)),
      Value::of(interp::testing::ints(runtime::ElemKind::Bool, {8}, {1, 1, 0, 1, 0, 1, 1, 1})),
      Value::of_key(runtime::Key{17, 4})};
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    const Runs r = run_both(p.prog(), p.index("step"), args, p.dims, o);
    expect_same(r.kernels, r.reference, "step");
  }
}

TEST(KernelBackend, AContractionBatchingBothOperandsLeadingAxesRunsAsTheReferenceDoes) {
  // Both operands' `...` are batched one for one (attention's scores and values), forward and gradients.
  interp::testing::Program p(R"(fn scores(q : ℝ[..., t: 5, d: 4], k : ℝ[..., s: 6, d: 4]) -> ℝ[..., t: 5, s: 6] =
  contract(axis d, q, k)
fn loss(q : ℝ[b: 2, h: 3, t: 5, d: 4], k : ℝ[b: 2, h: 3, s: 6, d: 4]) -> ℝ[] = sum(scores(q, k) ^ 2)
fn grads(q : ℝ[b: 2, h: 3, t: 5, d: 4], k : ℝ[b: 2, h: 3, s: 6, d: 4]) -> (ℝ[b: 2, h: 3, t: 5, d: 4], ℝ[b: 2, h: 3, s: 6, d: 4]) =
  (grad(loss)(q, k), grad(loss, wrt = k)(q, k))
)");
  std::vector<double> qs, ks;
  for (int i = 0; i < 120; ++i) qs.push_back(std::sin(0.37 * i) * 1.5);
  for (int i = 0; i < 144; ++i) ks.push_back(std::cos(0.53 * i) - 0.25);
  const std::vector<Value> args = {Value::of(interp::testing::reals({2, 3, 5, 4}, qs)),
                                   Value::of(interp::testing::reals({2, 3, 6, 4}, ks))};
  // By formula in f64: scores[b, h, t, s] = Σ_d q[b, h, t, d] k[b, h, s, d].
  const Value plain = p.call("scores", args);
  ASSERT_EQ(plain.tensor.shape, (runtime::Shape{2, 3, 5, 6}));
  for (int bh = 0; bh < 6; ++bh)
    for (int t = 0; t < 5; ++t)
      for (int s = 0; s < 6; ++s) {
        double want = 0.0;
        for (int d = 0; d < 4; ++d) want = want + qs[static_cast<size_t>((bh * 5 + t) * 4 + d)] * ks[static_cast<size_t>((bh * 6 + s) * 4 + d)];
        EXPECT_EQ(plain.tensor.reals[static_cast<size_t>((bh * 5 + t) * 6 + s)], want);
      }
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    expect_same(run_both(p.prog(), p.index("scores"), args, p.dims, o).kernels,
                run_both(p.prog(), p.index("scores"), args, p.dims, o).reference, "scores");
    const Runs g = run_both(p.prog(), p.index("grads"), args, p.dims, o);
    expect_same(g.kernels, g.reference, "grads");
  }
  // The two `...` are the same axes: another count is a run-time error.
  const std::vector<Value> other = {Value::of(interp::testing::reals({2, 3, 5, 4}, qs)),
                                    Value::of(interp::testing::reals({6, 6, 4}, ks))};
  try {
    p.call("scores", other);
    ADD_FAILURE() << "ran with `...` of 2 and 1 axes";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the first holds 2 and the second 1"), std::string::npos) << e.what();
  }
}

TEST(KernelBackend, ArgmaxAndAccuracyRunAsTheReferenceDoes) {
  interp::testing::Program p(R"(fn picks(x : ℝ[..., b: 3, v: 8], t : i32[..., b: 3]) -> (i32[..., b: 3], i32[..., v: 8], ℝ[]) =
  (argmax(axis v, x), argmin(axis b, x), accuracy(x, t))
)");
  std::vector<double> xs = testing::specials_and_random(48, 5);
  xs[9] = xs[12];  // a tie in row 1
  const std::vector<Value> args = {Value::of(interp::testing::reals({2, 3, 8}, xs)),
                                   Value::of(interp::testing::ints(runtime::ElemKind::I32, {2, 3}, {0, 4, 7, 1, 1, 2}))};
  const Value reference = p.call("picks", args);
  ASSERT_EQ(reference.elements.at(0).tensor.shape, (runtime::Shape{2, 3}));
  // Each row's answer by its definition: the first largest, a NaN first of all.
  for (int row = 0; row < 6; ++row) {
    int want = 0;
    for (int v = 1; v < 8; ++v) {
      const double best = xs[static_cast<size_t>(row * 8 + want)], here = xs[static_cast<size_t>(row * 8 + v)];
      if (!std::isnan(best) && (std::isnan(here) || here > best)) want = v;
    }
    EXPECT_EQ(reference.elements[0].tensor.ints[static_cast<size_t>(row)], want) << "row " << row;
  }
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    const Runs r = run_both(p.prog(), p.index("picks"), args, p.dims, o);
    expect_same(r.kernels, r.reference, "picks");
  }
}

TEST(KernelBackend, AComputedHalfRoundsThroughF32AsTheReferenceDoes) {
  // 1 + (2^-8 + 2^-30) rounds to f32 as 1 + 2^-8, a bf16 tie that goes to
  // even (1); rounded to bf16 directly it is above the tie (1 + 2^-7). A
  // kernel must take the same path as the reference for each setting.
  interp::testing::Program p(R"(fn h(x : ℝ[4], y : ℝ[4]) -> ℝ[4] = (x as bf16) + y
)");
  const double y = std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  std::vector<Value> args = {Value::of(interp::testing::reals({4}, {1, 1, 1, 1})),
                             Value::of(interp::testing::reals({4}, {y, y, y, y}))};
  for (bool half_intermediates : {false, true}) {
    precision::RealizeOptions o;
    o.policy = Policy::BF16;
    o.half_intermediates = half_intermediates;
    const Runs r = run_both(p.prog(), p.index("h"), args, p.dims, o);
    expect_same(r.kernels, r.reference, "result");
    EXPECT_EQ(r.kernels.tensor.reals[0], half_intermediates ? 1.0 + std::ldexp(1.0, -7) : 1.0);
    EXPECT_EQ(r.runtime_launches, 0);
  }
}

TEST(KernelBackend, AReferenceKernelErrorIsStillPlacedAtItsSite) {
  interp::testing::Program p(R"(fn f(x : ℝ[..., n: 4]) -> ℝ[] = max(x)
)");
  precision::RealizeOptions o;
  const precision::Realization r = precision::realize(p.prog(), p.index("f"), o, p.dims);
  InterpretingRunner runner;
  KernelEngine engine(p.prog(), p.index("f"), p.dims, false, runner);
  interp::Interpreter in(p.prog(), p.dims, &r);
  in.set_launcher(&engine);
  // An empty reduction has no kernel; the reference kernel reports it.
  try {
    in.call(p.index("f"), {Value::of(runtime::Tensor::real({0, 4}))});
    FAIL() << "expected an error";
  } catch (const interp::EvalError& err) {
    EXPECT_NE(std::string(err.what()).find("main.qr:1:"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("size 0"), std::string::npos) << err.what();
  }
  EXPECT_EQ(engine.runtime_launches(), 1);
}

TEST(KernelIr, PrintsALoweredNestAndFusesOnlyWhereAsked) {
  KernelBuilder b("demo");
  const int in = b.buffer(ElemType::F32, {3});
  const int out = b.buffer(ElemType::F32, {});
  Kernel& k = b.kernel();
  const int s = b.new_scalar();
  Stmt init;
  init.kind = StmtKind::Set;
  init.scalar = s;
  init.expr = b.constant(0.0);
  k.body.push_back(init);
  Stmt loop;
  loop.kind = StmtKind::Loop;
  loop.var = b.new_loop_var();
  loop.extent = 3;
  Stmt acc;
  acc.kind = StmtKind::Set;
  acc.scalar = s;
  const int x = b.load(in, Affine{0, {{loop.var, 1}}});
  acc.expr = b.round(runtime::FloatType::F32, b.fma(x, x, b.scalar(s)));
  loop.body.push_back(acc);
  k.body.push_back(loop);
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.expr = b.round(runtime::FloatType::F32, b.scalar(s));  // already f32: not rounded twice
  k.body.push_back(store);
  Kernel kernel = b.take();
  EXPECT_EQ(print_kernel(kernel),
            "kernel demo (%0 : f32[3]) -> %1 : f32[] {\n"
            "  s0 = 0\n"
            "  for i0 in 0..3 {\n"
            "    s0 = f32(fma(%0[i0], %0[i0], s0))\n"
            "  }\n"
            "  %1[0] = f32(s0)\n"
            "}\n");
  EXPECT_EQ(kernel_flops(kernel), 6);
  // The fold is the fused chain, each step rounded to f32.
  runtime::Tensor v = runtime::Tensor::real({3});
  v.reals = {1.0 + std::ldexp(1.0, -12), 0.0, 0.0};
  const runtime::Tensor r = run_kernel(kernel, {&v});
  EXPECT_EQ(r.reals[0], runtime::round_to(runtime::FloatType::F32, std::fma(v.reals[0], v.reals[0], 0.0)));
}

// A nest that copies its packed product out, as lowering writes one for a
// product with no epilogue: s1 = scratch[i, j]; s0 = f32(s1); out[i, j] = s0.
// Only that shape is "as it is": a transposed store, an epilogue, a rounding
// to bf16, or a scalar read before it is set are not.
TEST(KernelIr, ANestThatCopiesItsProductOutStoresTheProductAsItIs) {
  enum class Variant { Copy, Transposed, Epilogue, Bf16, SetsOutOfOrder };
  auto build = [](Variant v) {
    KernelBuilder b("dot");
    const int a = b.buffer(ElemType::F32, {4, 3});
    const int w = b.buffer(ElemType::F32, {3, 5});
    const int scratch = b.buffer(ElemType::F32, {4, 5});
    const int out = b.buffer(v == Variant::Bf16 ? ElemType::BF16 : ElemType::F32, {4, 5});
    Kernel& k = b.kernel();
    PackedProduct p;
    p.a = a;
    p.b = w;
    p.m = 4;
    p.n = 5;
    p.k = 3;
    p.a_rs = 3;
    p.a_cs = 1;
    p.b_rs = 5;
    p.b_cs = 1;
    p.scratch = scratch;
    k.product = p;
    const int i = b.new_loop_var(), j = b.new_loop_var();
    const Affine at{0, {{i, 5}, {j, 1}}};
    const Affine transposed{0, {{i, 1}, {j, 4}}};
    const int s0 = b.new_scalar(), s1 = b.new_scalar();
    const Stmt read = set_stmt(s1, b.load(scratch, at));
    const runtime::FloatType t = v == Variant::Bf16 ? runtime::FloatType::BF16 : runtime::FloatType::F32;
    const Stmt round = set_stmt(s0, v == Variant::Epilogue
                                        ? b.round(t, b.binary(runtime::BinaryOp::Add, b.scalar(s1), b.constant(1.0)))
                                        : b.round(t, b.scalar(s1)));
    const Stmt store = store_stmt(out, v == Variant::Transposed ? transposed : at, b.scalar(s0));
    std::vector<Stmt> body =
        v == Variant::SetsOutOfOrder ? std::vector<Stmt>{round, read, store} : std::vector<Stmt>{read, round, store};
    k.body.push_back(loop_stmt(i, 4, {loop_stmt(j, 5, std::move(body))}));
    return b.take();
  };
  EXPECT_TRUE(stores_product_as_is(build(Variant::Copy)));
  for (Variant v : {Variant::Transposed, Variant::Epilogue, Variant::Bf16, Variant::SetsOutOfOrder})
    EXPECT_FALSE(stores_product_as_is(build(v))) << static_cast<int>(v);
  Kernel no_product = build(Variant::Copy);
  no_product.product.reset();
  EXPECT_FALSE(stores_product_as_is(no_product));
}

}  // namespace
}  // namespace quire::kernel
