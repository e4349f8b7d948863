#include "quire/syntax/ast_printer.h"

#include <gtest/gtest.h>

#include "quire/syntax/syntax_testing.h"

namespace quire::syntax {
namespace {

using testing::parse;

TEST(AstPrinter, SmallModelGolden) {
  auto p = parse(R"(import "lib.qr" as lib
dim B
const D : nat = 2 * 2

module Mlp{In Out : dim} {
  param w : R[In, Out] init = normal(0.02)
  param s : ℝ[Out] numerics high frozen
  use norm : lib.RMSNorm{Out}
  use deep : stack{3}(lib.Block{In})

  fn apply(x : ℝ[..., In], eps : f64 = 1e-5) -> ℝ[..., Out] =
    let h = precision(bf16) { x @ w as f32acc }
    let (a, _) = (h, -h^2)
    numerics(high) { norm.apply(a + s, eps) }
}

fn loss(theta : params Mlp{D, D}, batch : (ℝ[batch: B, model: D], i32[B])) -> ℝ[] =
  let (x, y) = batch
  mean(axis batch, (Mlp.apply(theta, x) - one_hot(y, model: D))^2)
)");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->printed(),
            "import \"lib.qr\" as lib\n"
            "dim B\n"
            "const D : nat = (2 * 2)\n"
            "module Mlp{In Out : dim}\n"
            "  param w : ℝ[In, Out] init = normal(0.02)\n"
            "  param s : ℝ[Out] numerics high frozen\n"
            "  use norm : lib.RMSNorm{Out}\n"
            "  use deep : stack{3}(lib.Block{In})\n"
            "  fn apply(x : ℝ[..., In], eps : f64 = 1e-5) -> ℝ[..., Out] =\n"
            "    let h = precision(bf16) { ((x · w) as f32acc) }\n"
            "    let (a, _) = (h, (-(h ^ 2)))\n"
            "    numerics(high) { norm.apply((a + s), eps) }\n"
            "fn loss(θ : params Mlp{D, D}, batch : (ℝ[batch: B, model: D], i32[B])) -> ℝ[] =\n"
            "  let (x, y) = batch\n"
            "  mean(axis batch, ((Mlp.apply(θ, x) - one_hot(y, model: D)) ^ 2))\n");
}

TEST(AstPrinter, TrainingGolden) {
  auto p = parse(R"(optimizer sgd {
  lr = 0.1
  momentum : f64 = 0.9
}
training run {
  model = m.Model
  data = stream "d.npy" |> shuffle(seed = 3)
  checkpoint every 2 epochs to "out/\"x\""
  epochs : nat = 1
}
)");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->printed(),
            "optimizer sgd\n"
            "  lr = 0.1\n"
            "  momentum : f64 = 0.9\n"
            "training run\n"
            "  model = m.Model\n"
            "  epochs : nat = 1\n"
            "  data = stream \"d.npy\" |> shuffle(seed = 3)\n"
            "  checkpoint every 2 epochs to \"out/\\\"x\\\"\"\n");
}

TEST(AstPrinter, PlaceholdersPrintAsErrors) {
  auto p = parse("const D : nat = )\nfn f(x : ) -> ℝ[] =\n  let = 1\n  x\n");
  EXPECT_TRUE(p->sink.has_errors());
  EXPECT_EQ(p->printed(),
            "const D : nat = <error>\n"
            "fn f(x : <error>) -> ℝ[] =\n"
            "  let <error> = 1\n"
            "  x\n");
}

TEST(AstPrinter, PrintingIsAFixedPoint) {
  // The printout of a tree is itself a program that parses to the same printout
  // (expressions gain parentheses once, then stay put).
  auto p = parse("fn f(x : ℝ[B]) -> ℝ[B] =\n  let y = -x^2 + 3 · x as bf16\n  y / 2 < 1\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  auto again = parse(p->printed());
  ASSERT_FALSE(again->sink.has_errors()) << again->rendered();
  EXPECT_EQ(again->printed(), p->printed());
}

}  // namespace
}  // namespace quire::syntax
