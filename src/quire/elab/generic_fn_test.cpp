// Generic functions (`fn f{N}(…)`), from the call to the bits: the size
// parameters a call infers and the Call's `sizes` that carry them, the names
// the caller gives to the axes of those sizes, generic calls nested in
// generic and module functions, and the interpreter running them with the
// sizes bound per call (as a module's dimensions are).

#include <gtest/gtest.h>

#include "quire/elab/elab_testing.h"
#include "quire/elab/summary.h"
#include "quire/interp/interp_testing.h"

namespace quire::elab {
namespace {

using interp::Value;
using interp::testing::expect_reals;
using interp::testing::reals;
using runtime::Tensor;

// `scale` multiplies the last axis by a vector of its size; `twice` calls it
// from another generic function, `Scaled.apply` from a module's function.
const char* kScale = R"(dim B
fn scale{N}(x : ℝ[..., n: N], w : ℝ[n: N]) -> ℝ[..., n: N] = x * w
fn twice{M}(x : ℝ[..., m: M], w : ℝ[M]) -> ℝ[..., m: M] = scale(scale(x, w), w)
module Scaled {
  param w : ℝ[k: 3]
  fn apply(x : ℝ[b: 2, k: 3]) -> ℝ[b: 2, k: 3] = scale(x, w)
}
fn named(x : ℝ[batch: B, vocab: 3], w : ℝ[3]) -> ℝ[batch: B, vocab: 3] = scale(x, w)
fn positional(x : ℝ[B, 3], w : ℝ[vocab: 3]) -> ℝ[B, 3] = scale(x, w)
fn nested(x : ℝ[batch: B, vocab: 3], w : ℝ[3]) -> ℝ[batch: B, vocab: 3] = twice(x, w)
)";

TEST(GenericFunction, CallsInferTheSizesAndPrintThem) {
  auto e = testing::elaborate_text(kScale);
  ASSERT_TRUE(e->ok()) << e->rendered();
  const core::Function& scale = e->fn("scale");
  EXPECT_EQ(scale.dims, std::vector<std::string>{"N"});
  EXPECT_EQ(scale.module, -1);
  // The Call's sizes are the bound sizes in the order of the callee's dims:
  // what the interpreter binds the callee's symbols to.
  const core::Instr& call = e->fn("named").body.back();
  ASSERT_EQ(call.op, core::Op::Call);
  ASSERT_EQ(call.sizes.size(), 1u);
  EXPECT_EQ(call.sizes[0], Size::constant(3));
  EXPECT_EQ(e->core_of("named"),
            "fn named(x : ℝ[batch: B, vocab: 3], w : ℝ[3]) -> ℝ[batch: B, vocab: 3] {\n"
            "  %3 : ℝ[batch: B, vocab: 3] = call scale{N = 3}(x, w)\n"
            "  return %3\n"
            "}\n");
  // Inside a generic function the parameter is a symbol, bound again at each call.
  EXPECT_EQ(e->core_of("twice"),
            "fn twice{M}(x : ℝ[..., m: M], w : ℝ[M]) -> ℝ[..., m: M] {\n"
            "  %3 : ℝ[..., m: M] = call scale{N = M}(x, w)\n"
            "  %4 : ℝ[..., m: M] = call scale{N = M}(%3, w)\n"
            "  return %4\n"
            "}\n");
  EXPECT_NE(e->core_of("Scaled.apply").find("call scale{N = 3}(x, w)"), std::string::npos)
      << e->core_of("Scaled.apply");
}

TEST(GenericFunction, TheCallerNamesTheAxesOfASizeParameter) {
  auto e = testing::elaborate_text(kScale);
  ASSERT_TRUE(e->ok()) << e->rendered();
  // `n: N` matched `vocab` (and the positional `3` of w): the result's axis
  // takes the name of the axis that bound N.
  EXPECT_EQ(e->type(e->fn("named").body.back().type), "ℝ[batch: B, vocab: 3]");
  // Bound by a positional axis, the result's axis is positional, even where
  // a later argument's axis (w's `vocab`) has a name.
  EXPECT_EQ(e->type(e->fn("positional").body.back().type), "ℝ[B, 3]");
  // Through two generic calls the name survives: twice's `m` is vocab's.
  EXPECT_EQ(e->type(e->fn("nested").body.back().type), "ℝ[batch: B, vocab: 3]");
  // A declared name that differs from the caller's is no error (`k` for `n`),
  // but a name outside the parameter's axes still must match.
  auto bad = testing::elaborate_text(R"(fn f{N}(x : ℝ[row: 2, n: N]) -> ℝ[n: N] = sum(axis row, x)
fn g(x : ℝ[col: 2, k: 5]) -> ℝ[k: 5] = f(x)
)");
  EXPECT_TRUE(bad->has_error("E0401", 2, 42, "axis `col` where `row` is declared")) << bad->rendered();
}

TEST(GenericFunction, SignaturesShowTheSizeParameters) {
  auto e = testing::elaborate_text(kScale);
  ASSERT_TRUE(e->ok()) << e->rendered();
  std::string elab = print_elab(*e->prog);
  EXPECT_NE(elab.find("fn scale{N}(x : ℝ[..., n: N], w : ℝ[n: N]) -> ℝ[..., n: N]\n"), std::string::npos) << elab;
  std::string summary = print_summary(*e->prog);
  EXPECT_NE(summary.find("main.qr twice{M} : ℝ[..., m: M]\n"), std::string::npos) << summary;
}

TEST(GenericFunction, TheInterpreterBindsTheSizesPerCall) {
  interp::testing::Program p(kScale, {{"B", 2}});
  Tensor x = reals({2, 3}, {0.5, -1.0, 2.0, 3.0, 0.25, -4.0});
  Tensor w = reals({3}, {1.5, -2.0, 0.1});
  std::vector<double> once, twice;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double v = x.reals[i * 3 + j] * w.reals[j];
      once.push_back(v);
      twice.push_back(v * w.reals[j]);
    }
  expect_reals(p("named", {x, w}), {2, 3}, once);
  expect_reals(p("positional", {x, w}), {2, 3}, once);
  expect_reals(p("nested", {x, w}), {2, 3}, twice);
  // From a module's function: the parameter w is the vector.
  interp::ParamMap params;
  params["w"] = w;
  expect_reals(p.call("Scaled.apply", {interp::testing::tree(params), Value::of(x)}).tensor, {2, 3}, once);
  // Other sizes at another call of the same function.
  interp::testing::Program q(std::string(kScale) + "fn wide(x : ℝ[4, 5], w : ℝ[5]) -> ℝ[4, 5] = scale(x, w)\n");
  Tensor xs = Tensor::real({4, 5});
  Tensor ws = Tensor::real({5});
  for (int k = 0; k < 20; ++k) xs.reals[k] = k * 0.5 - 3.0;
  for (int k = 0; k < 5; ++k) ws.reals[k] = 1.0 / (k + 1);
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) want.push_back(xs.reals[i * 5 + j] * ws.reals[j]);
  expect_reals(q("wide", {xs, ws}), {4, 5}, want);
}

TEST(GenericFunction, RecursionThroughGenericCallsIsStillFound) {
  auto e = testing::elaborate_text(R"(fn f{N}(x : ℝ[N]) -> ℝ[N] = g(x)
fn g{M}(x : ℝ[M]) -> ℝ[M] = f(x) + 1.0
)");
  EXPECT_TRUE(e->has_error("E0502", 2, 29, "which leads back to it")) << e->rendered();
}

}  // namespace
}  // namespace quire::elab
