// Elaboration of well-formed programs: modules and parameter paths, calls
// with `...` and defaults, tuples, annotations, regularity, effects, numerics
// marks and the stability of site names. The error paths are in
// elaborator_errors_test.cpp.

#include "quire/elab/elaborator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "quire/core/printer.h"
#include "quire/elab/elab_testing.h"

namespace quire::elab {
namespace {

using testing::elaborate_files;
using testing::elaborate_text;
using testing::kLinear;

const char* kTower = R"(module RMSNorm{D : dim} {
  param γ : ℝ[D]  init = ones

  fn apply(x : ℝ[..., model: D], eps : f64 = 1e-6) -> ℝ[..., model: D] =
    let ms = mean(axis model, x^2)
    x / sqrt(ms + real(eps)) * γ
}

const D : nat = 4
const L : nat = 3

module Block {
  use norm : RMSNorm{D}
  use proj : lin.Linear{D, D}

  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] =
    x + proj.apply(gelu(norm.apply(x)))
}

module Tower {
  use blocks : stack{L}(Block)
  use final  : RMSNorm{D}

  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] =
    final.apply(blocks.apply(x))
}
)";

std::string flattened(const Program& prog, const ParamsType& p) {
  std::string out;
  for (const auto& [path, type] : prog.flatten(p)) out += path + " : " + prog.printer().tensor(type) + "\n";
  return out;
}

int module_index(const Program& prog, const std::string& name) {
  for (size_t i = 0; i < prog.modules.size(); ++i)
    if (prog.modules[i].name == name) return static_cast<int>(i);
  return -1;
}

TEST(Elaborate, ParameterPathsAndShapesOfAStackedTower) {
  auto e = elaborate_files({{"main.qr", std::string("import \"lin.qr\" as lin\n") + kTower}, {"lin.qr", kLinear}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  ParamsType tower{module_index(*e->prog, "Tower"), {}, {}};
  EXPECT_EQ(flattened(*e->prog, tower),
            "blocks.norm.γ : ℝ[3, 4]\n"
            "blocks.proj.w : ℝ[3, 4, 4]\n"
            "blocks.proj.b : ℝ[3, 4]\n"
            "final.γ : ℝ[4]\n");
  // The declarations behind each path, in the same order.
  auto decls = e->prog->flatten_decls(tower);
  ASSERT_EQ(decls.size(), 4u);
  EXPECT_EQ(decls[1]->init.kind, "xavier_uniform");
  EXPECT_EQ(decls[3]->init.kind, "ones");
  // Linear at symbolic and at constant dimensions.
  ParamsType lin{module_index(*e->prog, "Linear"), {Size::symbol("In"), Size::symbol("Out")}, {}};
  EXPECT_EQ(flattened(*e->prog, lin), "w : ℝ[In, Out]\nb : ℝ[Out]\n");
  lin.dims = {Size::constant(3), Size::constant(5)};
  EXPECT_EQ(flattened(*e->prog, lin), "w : ℝ[3, 5]\nb : ℝ[5]\n");
  // The stack folds Block.apply over the copies.
  EXPECT_NE(e->core_of("Tower.apply").find("= fold 3 Block.apply(stacked blocks; acc x)"), std::string::npos)
      << e->core_of("Tower.apply");
}

TEST(Elaborate, StacksNestAndTakeSymbolicCounts) {
  auto e = elaborate_text(R"(module Cell{H : dim} {
  param w : ℝ[H, H]
  fn apply(x : ℝ[..., H]) -> ℝ[..., H] = x · w
}
module Deep{L H : dim} {
  use cells : stack{L}(stack{2}(Cell{H}))
  use one : stack{L + 1}(Cell{2 * H})
}
module Top {
  use d : Deep{5, 3}
}
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  ParamsType top{module_index(*e->prog, "Top"), {}, {}};
  EXPECT_EQ(flattened(*e->prog, top), "d.cells.w : ℝ[5, 2, 3, 3]\nd.one.w : ℝ[6, 6, 6]\n");
  ParamsType deep{module_index(*e->prog, "Deep"), {Size::symbol("L"), Size::symbol("H")}, {}};
  EXPECT_EQ(flattened(*e->prog, deep), "cells.w : ℝ[L, 2, H, H]\none.w : ℝ[L + 1, 2·H, 2·H]\n");
}

TEST(Elaborate, StackedParameterTreesAsArguments) {
  auto e = elaborate_text(R"(module B {
  param w : ℝ[m: 4]
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = x * w
}
fn f(θ : params stack{3}(B), x : ℝ[m: 4]) -> ℝ[m: 4] = B.apply(θ, x)
fn g(θ : params stack{0}(B)) -> ℝ[] = 0.0
fn h(θ : params stack{2}(Nope)) -> ℝ[] = 0.0
)");
  EXPECT_EQ(e->errors().size(), 2u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 6, 23, "a stack needs at least one copy, not 0")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 7, 26, "no module named `Nope`")) << e->rendered();
  EXPECT_TRUE(e->fn("f").checked);
  EXPECT_EQ(e->core_of("f"),
            "fn f(θ : params stack{3}(B), x : ℝ[m: 4]) -> ℝ[m: 4] {\n"
            "  %3 : ℝ[m: 4] = fold 3 B.apply(stacked θ; acc x)\n"
            "  return %3\n"
            "}\n");
}

TEST(Elaborate, QuotientSizesAreDividedAtTheInstance) {
  auto f = elaborate_text(R"(module Heads{D H : dim} {
  param w : ℝ[D / H, H]  init = ones
  fn apply(x : ℝ[..., D / H]) -> ℝ[..., H] = x · w
}
module M {
  use h : Heads{8, 2}
  fn apply(x : ℝ[4]) -> ℝ[2] = h.apply(x)
}
)");
  ASSERT_TRUE(f->ok()) << f->rendered();
  ParamsType m{module_index(*f->prog, "M"), {}, {}};
  EXPECT_EQ(flattened(*f->prog, m), "h.w : ℝ[4, 2]\n");
  EXPECT_EQ(f->core_of("M.apply"),
            "fn M.apply(θ : params M, x : ℝ[4]) -> ℝ[2] {\n"
            "  h : params Heads{8, 2} = θ.h\n"
            "  %4 : ℝ[2] = call Heads.apply{D = 8, H = 2}(h, x)\n"
            "  return %4\n"
            "}\n");
  EXPECT_EQ(f->type(f->fn("Heads.apply").args[1].type), "ℝ[..., D / H]");
  // D / H · H is D: an axis of symbolic size splits into heads and merges back.
  auto g = elaborate_text(R"(module Attn{D H : dim} {
  fn heads(x : ℝ[..., model: D]) -> ℝ[..., heads: H, d: D / H] = split(axis model, x, heads: H, d: D / H)
  fn back(x : ℝ[..., heads: H, d: D / H]) -> ℝ[..., model: D] = merge(axis heads, axis d, x, model: D)
}
)");
  ASSERT_TRUE(g->ok()) << g->rendered();
}

TEST(Elaborate, CallsBindEllipsisAndTakeTheDeclaredResultNames) {
  auto e = elaborate_files({{"main.qr", R"(import "lin.qr" as lin
dim B
fn f(θ : params lin.Linear{4, 3}, x : ℝ[batch: B, model: 4]) -> ℝ[batch: B, 3] =
  lin.Linear.apply(θ, x)
fn g(θ : params lin.Linear{4, 3}, x : ℝ[2, 5, model: 4]) -> ℝ[2, 5, 3] =
  lin.Linear.apply(θ, x)
)"},
                            {"lin.qr", kLinear}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->core_of("f"),
            "fn f(θ : params Linear{4, 3}, x : ℝ[batch: B, model: 4]) -> ℝ[batch: B, 3] {\n"
            "  %3 : ℝ[batch: B, 3] = call Linear.apply{In = 4, Out = 3}(θ, x)\n"
            "  return %3\n"
            "}\n");
  EXPECT_EQ(e->type(e->fn("g").body.back().type), "ℝ[2, 5, 3]");
  // The callee itself keeps its `...`.
  EXPECT_EQ(e->core_of("Linear.apply"),
            "fn Linear.apply{In Out}(θ : params Linear{In, Out}, x : ℝ[..., In]) -> ℝ[..., Out] {\n"
            "  w : ℝ[In, Out] = θ.w\n"
            "  %4 : ℝ[..., Out] = dot x, w\n"
            "  b : ℝ[Out] = θ.b\n"
            "  %6 : ℝ[..., Out] = add %4, b\n"
            "  return %6\n"
            "}\n");
}

TEST(Elaborate, EllipsisBindsOnceForEveryArgument) {
  auto e = elaborate_text(R"(fn add2(x : ℝ[..., 4], y : ℝ[..., 4]) -> ℝ[..., 4] = x + y
fn ok(a : ℝ[b: 2, 4], c : ℝ[b: 2, 4]) -> ℝ[b: 2, 4] = add2(a, c)
fn bad(a : ℝ[b: 2, 4], c : ℝ[3, 4]) -> ℝ[b: 2, 4] = add2(a, c)
)");
  EXPECT_EQ(e->errors().size(), 1u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 3, 61,
                           "argument `y` of `add2` should be ℝ[b: 2, 4], but is ℝ[3, 4]: the arguments' `...` stand "
                           "for different leading axes"))
      << e->rendered();
}

TEST(Elaborate, DefaultAndKeywordArguments) {
  auto e = elaborate_text(R"(fn scale(x : ℝ[3], s : f64 = 2.0, t : ℝ[] = 1.0) -> ℝ[3] = x * real(s) + t
fn a(x : ℝ[3]) -> ℝ[3] = scale(x)
fn b(x : ℝ[3]) -> ℝ[3] = scale(x, t = 5.0)
fn c(x : ℝ[3]) -> ℝ[3] = scale(t = 5.0, x = x, s = 0.5)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->core_of("a"),
            "fn a(x : ℝ[3]) -> ℝ[3] {\n"
            "  %2 : f64 = 2\n"
            "  %3 : ℝ[] = 1\n"
            "  %4 : ℝ[3] = call scale(x, %2, %3)\n"
            "  return %4\n"
            "}\n");
  EXPECT_EQ(e->core_of("b"),
            "fn b(x : ℝ[3]) -> ℝ[3] {\n"
            "  %2 : f64 = 2\n"
            "  %3 : ℝ[] = 5\n"
            "  %4 : ℝ[3] = call scale(x, %2, %3)\n"
            "  return %4\n"
            "}\n");
  EXPECT_NE(e->core_of("c").find("%2 : f64 = 0.5\n  %3 : ℝ[] = 5\n  %4 : ℝ[3] = call scale(x, %2, %3)"),
            std::string::npos)
      << e->core_of("c");
}

TEST(Elaborate, TuplesAndTuplePatterns) {
  auto e = elaborate_text(R"(dim B
fn f(batch : (ℝ[batch: B, model: 4], (ℝ[batch: B], i32[batch: B]))) -> (ℝ[batch: B], ℝ[]) =
  let (x, (y, _)) = batch
  let s = sum(axis model, x) + y
  (s, mean(s))
fn g(batch : (ℝ[2], ℝ[2])) -> ℝ[2] =
  batch.0 * batch.1
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->core_of("f"),
            "fn f(batch : (ℝ[batch: B, model: 4], (ℝ[batch: B], i32[batch: B]))) -> (ℝ[batch: B], ℝ[]) {\n"
            "  x : ℝ[batch: B, model: 4] = batch.0\n"
            "  %3 : (ℝ[batch: B], i32[batch: B]) = batch.1\n"
            "  y : ℝ[batch: B] = %3.0\n"
            "  %5 : ℝ[batch: B] = sum axis model x\n"
            "  s : ℝ[batch: B] = add %5, y\n"
            "  %7 : ℝ[] = mean s\n"
            "  %8 : (ℝ[batch: B], ℝ[]) = (s, %7)\n"
            "  return %8\n"
            "}\n");
}

TEST(Elaborate, LetAnnotationsConvertAndCheck) {
  auto e = elaborate_text(R"(fn f(x : ℝ[2, 3]) -> ℝ[rows: 2, cols: 3] =
  let y : ℝ[rows: 2, cols: 3] = x
  let z : ℝ[] = 1.5
  y * z
fn g(x : ℝ[2, 3]) -> ℝ[2, 3] =
  let y : ℝ[3, 2] = x
  x
)");
  EXPECT_EQ(e->errors().size(), 1u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 21, "the annotated let should be ℝ[3, 2], but is ℝ[2, 3]")) << e->rendered();
  EXPECT_EQ(e->type(e->fn("f").body.back().type), "ℝ[rows: 2, cols: 3]");
}

TEST(Elaborate, ModuleFunctionsCallEachOtherAndSubModules) {
  auto e = elaborate_files({{"main.qr", R"(import "lin.qr" as lin
module MLP{D H : dim} {
  use up : lin.Linear{D, H}
  use down : lin.Linear{H, D}
  fn hidden(x : ℝ[..., D]) -> ℝ[..., H] = relu(up.apply(x))
  fn apply(x : ℝ[..., D]) -> ℝ[..., D] = down.apply(hidden(x))
}
module Net {
  use mlp : MLP{4, 16}
  fn apply(x : ℝ[2, 4]) -> ℝ[2, 4] = mlp.apply(x)
}
)"},
                            {"lin.qr", kLinear}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->core_of("MLP.apply"),
            "fn MLP.apply{D H}(θ : params MLP{D, H}, x : ℝ[..., D]) -> ℝ[..., D] {\n"
            "  %3 : ℝ[..., H] = call MLP.hidden{D = D, H = H}(θ, x)\n"
            "  down : params Linear{H, D} = θ.down\n"
            "  %5 : ℝ[..., D] = call Linear.apply{In = H, Out = D}(down, %3)\n"
            "  return %5\n"
            "}\n");
  ParamsType net{module_index(*e->prog, "Net"), {}, {}};
  EXPECT_EQ(flattened(*e->prog, net),
            "mlp.up.w : ℝ[4, 16]\nmlp.up.b : ℝ[16]\nmlp.down.w : ℝ[16, 4]\nmlp.down.b : ℝ[4]\n");
}

std::string regularity(const core::Function& fn) {
  std::string out;
  for (size_t a = 0; a < fn.args.size(); ++a)
    out += (a ? ", " : "") + fn.args[a].name + " " + core::regularity_name(fn.arg_regularity.at(a));
  return out;
}

TEST(Elaborate, RegularityPerArgument) {
  auto e = elaborate_text(R"(fn smooth(x : ℝ[3], y : ℝ[3]) -> ℝ[3] = exp(x) * tanh(y) / sqrt(x * x + 1.0)
fn kinks(x : ℝ[3], y : ℝ[3], z : ℝ[3]) -> ℝ[3] = relu(x) + abs(y) + max(z, 0.0)
fn jumps(x : ℝ[3], y : ℝ[3], z : ℝ[3]) -> ℝ[3] = where(x > 0.0, y, z)
fn steps(x : ℝ[3]) -> ℝ[3] = (x as i32) as ℝ
fn rounds(x : ℝ[3]) -> ℝ[3] = x as bf16
fn reduce(x : ℝ[3], y : ℝ[3]) -> ℝ[] = max(x) + logsumexp(y)
fn ids(t : ℝ[v: 5, 2], i : i32[3]) -> ℝ[3, 2] = gather(axis v, t, i)
fn hot(i : i32[3]) -> ℝ[3, v: 5] = one_hot(i, v: 5)
fn unused(x : ℝ[3], y : ℝ[3]) -> ℝ[3] = x
fn through(a : ℝ[3], b : ℝ[3], c : ℝ[3]) -> ℝ[3] = jumps(c, b, a) + kinks(b, b, b)
fn host(x : ℝ[3], s : f64) -> ℝ[3] = x * real(s)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(regularity(e->fn("smooth")), "x C∞, y C∞");
  EXPECT_EQ(regularity(e->fn("kinks")), "x C⁰, y C⁰, z C⁰");
  EXPECT_EQ(regularity(e->fn("jumps")), "x discontinuous, y C∞, z C∞");
  EXPECT_EQ(regularity(e->fn("steps")), "x discontinuous");
  EXPECT_EQ(regularity(e->fn("rounds")), "x C∞");
  EXPECT_EQ(regularity(e->fn("reduce")), "x C⁰, y C∞");
  EXPECT_EQ(regularity(e->fn("ids")), "t C∞, i discontinuous");
  EXPECT_EQ(regularity(e->fn("hot")), "i discontinuous");
  EXPECT_EQ(regularity(e->fn("unused")), "x C∞, y C∞");
  EXPECT_EQ(regularity(e->fn("through")), "a C∞, b C⁰, c discontinuous");
  EXPECT_EQ(regularity(e->fn("host")), "x C∞, s C∞");
}

TEST(Elaborate, RegularityThroughModuleCallsAndStacks) {
  auto e = elaborate_text(R"(module Act {
  param w : ℝ[m: 4]
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = relu(x * w)
}
module Stack {
  use layers : stack{2}(Act)
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = layers.apply(x)
}
fn f(θ : params Stack, x : ℝ[m: 4]) -> ℝ[m: 4] = Stack.apply(θ, x)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(regularity(e->fn("Act.apply")), "θ C⁰, x C⁰");
  EXPECT_EQ(regularity(e->fn("Stack.apply")), "θ C⁰, x C⁰");
  EXPECT_EQ(regularity(e->fn("f")), "θ C⁰, x C⁰");
}

TEST(Elaborate, TheEffectRandDirectlyAndThroughCalls) {
  auto e = elaborate_text(R"(dim B
fn draw(k : key) -> ℝ[n: 3] = uniform(k, n: 3)
fn keys(k : key) -> (key, key) = split(k)
fn caller(k : key, x : ℝ[n: 3]) -> ℝ[n: 3] = x + draw(k)
fn indirect(k : key) -> ℝ[n: 3] = caller(k, normal(k, n: 3, std = 2.0))
fn pure(k : key, x : ℝ[n: 3]) -> ℝ[n: 3] = x
fn mask(k : key, x : ℝ[n: 3]) -> ℝ[n: 3] = where(bernoulli(k, 0.5, n: 3), x, 0.0)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_TRUE(e->fn("draw").uses_rand);
  EXPECT_TRUE(e->fn("keys").uses_rand);
  EXPECT_TRUE(e->fn("caller").uses_rand);
  EXPECT_TRUE(e->fn("indirect").uses_rand);
  EXPECT_FALSE(e->fn("pure").uses_rand);
  EXPECT_TRUE(e->fn("mask").uses_rand);
  EXPECT_EQ(regularity(e->fn("mask")), "k discontinuous, x C∞");
  EXPECT_EQ(e->core_of("draw"),
            "fn draw(k : key) -> ℝ[n: 3] {\n"
            "  %2 : ℝ[n: 3] = uniform [0, 1) k\n"
            "  return %2\n"
            "}\n");
  EXPECT_NE(e->core_of("indirect").find("normal (mean 0, std 2) k"), std::string::npos) << e->core_of("indirect");
}

TEST(Elaborate, NumericsMarksOnCoreInstructions) {
  auto e = elaborate_text(R"(fn f(x : ℝ[3], w : ℝ[3, 2]) -> ℝ[2] =
  let h = numerics(high) { exp(x) + 1.0 }
  let p = precision(bf16) { h · w }
  let q = precision(f16) { numerics(high) { p * 2.0 } + 1.0 }
  numerics(high) { matmul(x, w, out = f32) } + q + 3.0
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->core_of("f"),
            "fn f(x : ℝ[3], w : ℝ[3, 2]) -> ℝ[2] {\n"
            "  %3 : ℝ[3] = exp x  -- numerics(high)\n"
            "  %4 : ℝ[] = 1  -- numerics(high)\n"
            "  h : ℝ[3] = add %3, %4  -- numerics(high)\n"
            "  p : ℝ[2] = dot h, w  -- precision(bf16)\n"
            "  %7 : ℝ[] = 2  -- numerics(high)\n"
            "  %8 : ℝ[2] = mul p, %7  -- numerics(high)\n"
            "  %9 : ℝ[] = 1  -- precision(f16)\n"
            "  q : ℝ[2] = add %8, %9  -- precision(f16)\n"
            "  %11 : ℝ[2] = dot x, w out=f32  -- numerics(high)\n"
            "  %12 : ℝ[2] = add %11, q\n"
            "  %13 : ℝ[] = 3\n"
            "  %14 : ℝ[2] = add %12, %13\n"
            "  return %14\n"
            "}\n");
  // A literal as the whole block still belongs to it.
  auto g = elaborate_text("fn g() -> ℝ[] = numerics(high) { 2.0 }\n");
  ASSERT_TRUE(g->ok()) << g->rendered();
  EXPECT_EQ(g->fn("g").body.at(0).numerics, core::Numerics::High);
}

TEST(Elaborate, SitesAreStableAcrossElaborations) {
  std::map<std::string, std::string> files = {{"main.qr", std::string("import \"lin.qr\" as lin\n") + kTower},
                                              {"lin.qr", kLinear}};
  auto a = elaborate_files(files);
  auto b = elaborate_files(files);
  ASSERT_TRUE(a->ok()) << a->rendered();
  EXPECT_EQ(core::core_json(*a->prog).dump(), core::core_json(*b->prog).dump());
  EXPECT_EQ(core::print_core(*a->prog), core::print_core(*b->prog));
  const core::Function& norm = a->fn("RMSNorm.apply");
  EXPECT_EQ(core::site_name(norm, 5), "RMSNorm.apply/%5");
  EXPECT_EQ(norm.value_name(5), "ms");  // printed by its name, the site stays /%5
  auto json = core::core_json(*a->prog);
  bool found = false;
  for (const auto& fn : json["functions"])
    for (const auto& in : fn["body"])
      if (in["site"] == "RMSNorm.apply/%5") {
        found = true;
        EXPECT_EQ(in["name"], "ms");
        EXPECT_EQ(in["op"], "mean");
        EXPECT_EQ(in["line"], 6);
      }
  EXPECT_TRUE(found);
  // Reachable functions come callees first.
  int tower = a->prog->find_function("Tower.apply");
  std::vector<std::string> order;
  for (int f : core::reachable_functions(*a->prog, tower)) order.push_back(a->prog->functions[f].name);
  EXPECT_EQ(order, (std::vector<std::string>{"RMSNorm.apply", "Linear.apply", "Block.apply", "Tower.apply"}));
}

TEST(Elaborate, ImportsAreSharedAndOrderedDependenciesFirst) {
  auto e = elaborate_files({{"main.qr", "import \"a.qr\" as a\nimport \"sub/b.qr\" as b\nfn f() -> ℝ[] = 0.0\n"},
                            {"a.qr", "import \"sub/b.qr\" as b\nconst N : nat = 2\n"},
                            {"sub/b.qr", "import \"../c.qr\" as c\nconst M : nat = 3\n"},
                            {"c.qr", "const K : nat = 4\n"}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  // sub/b.qr is loaded once; the prelude's files come first, as every file imports them.
  std::vector<std::string> order, prelude;
  for (int f : e->prog->file_order)
    (e->prog->files[f].prelude ? prelude : order).push_back(e->prog->files[f].path);
  EXPECT_EQ(order, (std::vector<std::string>{"c.qr", "sub/b.qr", "a.qr", "main.qr"}));
  EXPECT_EQ(e->prog->files.size(), order.size() + prelude.size());
  ASSERT_FALSE(prelude.empty());
  EXPECT_EQ(e->prog->files[e->prog->file_order.front()].path, prelude.front());
}

TEST(Elaborate, SizeParametersAreSizesInTheSignatureAndTheBody) {
  auto e = elaborate_files({{"main.qr", R"(import "k.qr" as k
fn hot{N}(ids : i32[...], like : ℝ[n: N]) -> ℝ[..., n: N] =
  let h : ℝ[..., n: N] = one_hot(ids, n: N)
  h * like
fn heads{M}(x : ℝ[..., m: M]) -> ℝ[..., h: 2, d: M / 2] = split(axis m, x, h: 2, d: M / 2)
fn other{N}(x : ℝ[N], y : ℝ[k.N]) -> ℝ[k.N] = y
fn both(i : i32[b: 3], y : ℝ[c: 5], x : ℝ[m: 8]) -> (ℝ[b: 3, c: 5], ℝ[h: 2, d: 4]) = (hot(i, y), heads(x))
)"},
                            {"k.qr", "const N : nat = 7\n"}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->type(e->fn("hot").body.front().type), "ℝ[..., n: N]");  // one_hot's size is the parameter
  EXPECT_EQ(e->type(e->fn("heads").result), "ℝ[..., h: 2, d: M / 2]");
  // `k.N` is the other file's constant, never the function's own N.
  EXPECT_EQ(e->type(e->fn("other").args[1].type), "ℝ[7]");
  // At the call the quotient divides: 8 / 2.
  EXPECT_NE(e->core_of("both").find("call heads{M = 8}(x)"), std::string::npos) << e->core_of("both");
  EXPECT_NE(e->core_of("both").find("ℝ[h: 2, d: 4] = call heads"), std::string::npos) << e->core_of("both");
  EXPECT_NE(e->core_of("both").find("ℝ[b: 3, c: 5] = call hot{N = 5}(i, y)"), std::string::npos) << e->core_of("both");
}

TEST(Elaborate, ConstantsAndSizeArithmeticInTypes) {
  auto e = elaborate_files({{"main.qr", R"(import "k.qr" as k
const D : nat = 2 * k.H
const S : f64 = 0.5
dim B
fn f(x : ℝ[batch: B, model: D + 2]) -> ℝ[batch: B, model: 2 * k.H + 2] = x * S
fn g(x : ℝ[batch: 2 * B, m: D]) -> ℝ[batch: B + B, m: 6] = x
)"},
                            {"k.qr", "const H : nat = 3\n"}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(e->type(e->fn("f").result), "ℝ[batch: B, model: 8]");
  EXPECT_EQ(e->type(e->fn("g").args[0].type), "ℝ[batch: 2·B, m: 6]");
  EXPECT_EQ(e->prog->dims, (std::vector<std::string>{"B"}));
}

TEST(Elaborate, TheTrainingRun) {
  auto e = elaborate_text(R"(dim B
module M {
  param w : ℝ[model: 4]  init = normal(0.02)
}
fn loss(θ : params M, batch : (ℝ[batch: B, model: 4], ℝ[batch: B])) -> ℝ[] =
  mean(sum(axis model, batch.0 * θ.w) - batch.1)
optimizer sgd {
  lr : f64 = 0.1
  momentum : f64 = 0.9
}
training run {
  model     = M
  objective = loss
  optimizer = sgd
  data      = stream "d.npz" |> shuffle(seed = 3) |> batch(B = 8)
  epochs    : nat = 2
  checkpoint every 5 steps to "ck/"
}
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const TrainingInfo* t = e->prog->training();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(e->prog->modules[t->model].name, "M");
  EXPECT_EQ(e->prog->functions[t->objective].name, "loss");
  EXPECT_EQ(e->prog->optimizers[t->optimizer].name, "sgd");
  EXPECT_EQ(t->batch_dim, "B");
  EXPECT_EQ(t->batch_size, 8);
  EXPECT_EQ(t->epochs, 2);
  EXPECT_EQ(t->checkpoint_every, 5);
  EXPECT_EQ(t->checkpoint_unit, "steps");
  EXPECT_EQ(t->checkpoint_dir, "ck/");
  ASSERT_EQ(t->data.size(), 3u);
  EXPECT_EQ(t->data[0].path, "d.npz");
  EXPECT_EQ(t->data[1].args, (std::vector<std::pair<std::string, double>>{{"seed", 3}}));
  const InitExpr& init = e->prog->modules[t->model].params[0].init;
  EXPECT_EQ(init.kind, "normal");
  EXPECT_EQ(init.args, std::vector<double>{0.02});
}

}  // namespace
}  // namespace quire::elab

namespace quire::elab {
namespace {

// `inf` and `nan` are literals, found after every other name, and may be a constant's value.
TEST(Elaborate, InfAndNanAreLiteralsThatOtherNamesHide) {
  auto e = elaborate_text(R"(const NEG : f64 = -inf
fn masked(x : ℝ[n: 3]) -> ℝ[n: 3] = where(x > 0, x, -inf)
fn missing(x : ℝ[n: 3]) -> ℝ[n: 3] = x * 0 + nan
fn constant(x : ℝ[n: 3]) -> ℝ[n: 3] = max(x, NEG)
fn shadowed(inf : ℝ[]) -> ℝ[] = inf + 1
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  auto literals = [&](const char* name) {
    std::vector<double> out;
    for (const core::Instr& in : e->prog->functions.at(static_cast<size_t>(e->prog->find_function(name))).body)
      if (in.op == core::Op::Const) out.push_back(in.attr<core::attr::Literal>().value);
    return out;
  };
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(literals("masked"), std::vector<double>({0.0, -inf}));
  ASSERT_EQ(literals("missing").size(), 2u);
  EXPECT_TRUE(std::isnan(literals("missing")[1]));
  EXPECT_EQ(literals("constant"), std::vector<double>({-inf}));
  EXPECT_EQ(literals("shadowed"), std::vector<double>({1.0}));  // `inf` is the argument there
  EXPECT_NE(core::print_core(*e->prog).find("-inf"), std::string::npos);
}

// `iota(t: T)` (the identifier is ι) is i32[t: T]: an operation of its own,
// sized as a draw's axes are; a size of 0, an operand or no axis is refused.
TEST(Elaborate, IotaIsTheI32PositionsAlongANamedAxis) {
  auto e = elaborate_text(R"(const T : nat = 6
fn positions() -> i32[t: T] = iota(t: T)
fn greek() -> i32[u: 3] = ι(u: 3)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const core::Function& f = e->prog->functions.at(static_cast<size_t>(e->prog->find_function("positions")));
  ASSERT_EQ(f.body.size(), 1u);
  EXPECT_EQ(f.body[0].op, core::Op::Iota);
  EXPECT_EQ(core::print_instr(*e->prog, f, f.body[0]), "iota 6");
  for (const auto& [source, code, message] :
       {std::tuple{"fn f() -> i32[t: 0] = iota(t: 0)", "E0404", "an axis must have a positive size"},
        std::tuple{"fn f(x : ℝ[t: 3]) -> i32[t: 3] = iota(x, t: 3)", "E0405", "value argument"},
        std::tuple{"fn f() -> i32[t: 3] = iota()", "E0405", "names its one axis"}}) {
    auto bad = elaborate_text(source);
    EXPECT_FALSE(bad->ok()) << source;
    EXPECT_NE(bad->rendered().find(code), std::string::npos) << bad->rendered();
    EXPECT_NE(bad->rendered().find(message), std::string::npos) << bad->rendered();
  }
}

}  // namespace
}  // namespace quire::elab
