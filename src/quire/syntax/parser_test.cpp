#include "quire/syntax/parser.h"

#include <gtest/gtest.h>

#include "quire/syntax/syntax_testing.h"

namespace quire::syntax {
namespace {

using testing::final_expr;
using testing::parse;

// The tutorial of seeds/002 §1, in quire's spelling (`.qr`). Each comes twice:
// as the tutorial writes it (Unicode) and with every ASCII twin.

const char* kLinear = R"(-- 01_linear.qr — a linear layer: parameters, initializers, one function.
module Linear{In Out : dim} {
  param w : ℝ[In, Out]  init = xavier_uniform
  param b : ℝ[Out]      init = zeros

  fn apply(x : ℝ[…, In]) → ℝ[…, Out] =
    x · w + b
}
)";
const char* kLinearAscii = R"(-- 01_linear.qr, ASCII only
module Linear{In Out : dim} {
  param w : R[In, Out]  init = xavier_uniform
  param b : R[Out]      init = zeros

  fn apply(x : R[..., In]) -> R[..., Out] =
    x @ w + b
}
)";

const char* kNorm = R"(-- 02_norm.qr — named axes, reductions, broadcasting, hyperparameters.
module RMSNorm{D : dim} {
  param γ : ℝ[D]  init = ones

  fn apply(x : ℝ[..., model: D], eps : f64 = 1e-6) -> ℝ[..., model: D] =
    let ms = mean(axis model, x^2)        -- ℝ[...]: the `model` axis is reduced
    x / sqrt(ms + real(eps)) * γ          -- ms broadcasts back, γ aligns on `model`
}
)";
const char* kNormAscii = R"(module RMSNorm{D : dim} {
  param gamma : R[D]  init = ones

  fn apply(x : R[..., model: D], eps : f64 = 1e-6) -> R[..., model: D] =
    let ms = mean(axis model, x^2)
    x / sqrt(ms + real(eps)) * gamma
}
)";

const char* kTower = R"(-- 06_tower.qr — composition: imports, sub-modules, stacked blocks.
import "01_linear.qr" as lin
import "02_norm.qr"   as norm

const D : nat = 4
const L : nat = 3

module Block {
  use norm : norm.RMSNorm{D}
  use proj : lin.Linear{D, D}

  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] =
    x + proj.apply(gelu(norm.apply(x)))       -- residual connection
}

module Tower {
  use blocks : stack{L}(Block)                 -- L copies of Block, parameters stacked
  use final  : norm.RMSNorm{D}

  fn apply(x : ℝ[..., model: D]) -> ℝ[..., model: D] =
    final.apply(blocks.apply(x))
}
)";

const char* kTrain = R"(-- 07_train.qr — a training run: the tower of 06 learns y = 2·x + 1.
import "06_tower.qr" as t
dim B

fn loss(θ : params t.Tower, batch : (ℝ[batch: B, model: 4], ℝ[batch: B, model: 4])) -> ℝ[] =
  let (x, y) = batch
  mean((t.Tower.apply(θ, x) - y)^2)

optimizer adamw {
  lr           : f64 = 0.01
  weight_decay : f64 = 0.0
  schedule     : cosine(warmup = 20)
}

training run {
  model     = t.Tower
  objective = loss
  optimizer = adamw
  data      = stream "data/pairs.qr.d" |> shuffle(seed = 3) |> batch(B = 8)
  epochs    : nat = 10
  checkpoint every 50 steps to "ckpt/"
}
)";
const char* kTrainAscii = R"(import "06_tower.qr" as t
dim B

fn loss(theta : params t.Tower, batch : (R[batch: B, model: 4], R[batch: B, model: 4])) -> R[] =
  let (x, y) = batch
  mean((t.Tower.apply(theta, x) - y)^2)

optimizer adamw {
  lr           : f64 = 0.01
  weight_decay : f64 = 0.0
  schedule     : cosine(warmup = 20)
}

training run {
  model     = t.Tower
  objective = loss
  optimizer = adamw
  data      = stream "data/pairs.qr.d" |> shuffle(seed = 3) |> batch(B = 8)
  epochs    : nat = 10
  checkpoint every 50 steps to "ckpt/"
}
)";

TEST(Parser, TutorialLinear) {
  auto p = parse(kLinear);
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  ASSERT_EQ(p->file.modules.size(), 1u);
  const ast::ModuleDecl& m = p->file.modules[0];
  EXPECT_EQ(m.name.text, "Linear");
  ASSERT_EQ(m.dims.size(), 2u);
  EXPECT_EQ(m.dims[1].text, "Out");
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_EQ(m.params[0].type->elem, "real");
  EXPECT_EQ(m.params[0].type->axes.size(), 2u);
  EXPECT_EQ(print_expr(*m.params[1].init), "zeros");
  ASSERT_EQ(m.fns.size(), 1u);
  const ast::FnDecl& apply = m.fns[0];
  EXPECT_EQ(apply.args[0].type->axes[0].kind, ast::AxisExpr::Kind::Rest);
  EXPECT_EQ(apply.body->kind, ast::ExprKind::Block);
  const ast::Expr& value = *apply.body->children[0];
  EXPECT_EQ(value.binary, ast::BinaryOp::Add);
  EXPECT_EQ(value.children[0]->binary, ast::BinaryOp::Dot);
  EXPECT_EQ(p->text(value.range), "x · w + b");
  EXPECT_EQ(p->text(m.params[0].range), "param w : ℝ[In, Out]  init = xavier_uniform");
  EXPECT_EQ(p->text(apply.range).substr(0, 9), "fn apply(");
  EXPECT_TRUE(p->text(apply.range).ends_with("x · w + b"));
  EXPECT_TRUE(p->text(m.range).starts_with("module Linear{"));
  EXPECT_TRUE(p->text(m.range).ends_with("}"));
}

TEST(Parser, TutorialNorm) {
  auto p = parse(kNorm);
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::FnDecl& apply = p->file.modules.at(0).fns.at(0);
  EXPECT_EQ(p->file.modules[0].params[0].name.text, "γ");
  ASSERT_EQ(apply.args.size(), 2u);
  EXPECT_EQ(apply.args[1].type->kind, ast::TypeKind::Scalar);
  EXPECT_EQ(apply.args[1].type->elem, "f64");
  EXPECT_EQ(apply.args[1].default_value->name, "1e-6");
  EXPECT_FALSE(apply.args[1].default_value->is_integer);
  const ast::AxisExpr& model = apply.args[0].type->axes[1];
  EXPECT_EQ(model.name->text, "model");
  EXPECT_EQ(model.size->name, "D");
  EXPECT_EQ(p->text(model.range), "model: D");
  ASSERT_EQ(apply.body->lets.size(), 1u);
  const ast::Expr& mean = *apply.body->lets[0].value;
  ASSERT_EQ(mean.args.size(), 2u);
  EXPECT_EQ(mean.args[0].kind, ast::Arg::Kind::Axis);
  EXPECT_EQ(mean.args[0].name->text, "model");
  EXPECT_EQ(p->text(mean.range), "mean(axis model, x^2)");
  EXPECT_EQ(print_expr(*apply.body->children[0]), "((x / sqrt((ms + real(eps)))) * γ)");
}

TEST(Parser, TutorialTower) {
  auto p = parse(kTower);
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  ASSERT_EQ(p->file.imports.size(), 2u);
  EXPECT_EQ(p->file.imports[1].path, "02_norm.qr");
  EXPECT_EQ(p->file.imports[1].alias.text, "norm");
  ASSERT_EQ(p->file.consts.size(), 2u);
  EXPECT_EQ(p->file.consts[1].value->integer, 3);
  EXPECT_TRUE(p->file.consts[1].value->is_integer);
  const ast::ModuleDecl& block = p->file.modules.at(0);
  ASSERT_EQ(block.uses.size(), 2u);
  EXPECT_EQ(block.uses[1].module.name.size(), 2u);
  EXPECT_EQ(block.uses[1].module.args.size(), 2u);
  EXPECT_EQ(p->text(block.uses[1].module.range), "lin.Linear{D, D}");
  const ast::ModuleDecl& tower = p->file.modules.at(1);
  const ast::ModuleRef& blocks = tower.uses[0].module;
  EXPECT_TRUE(blocks.is_stack);
  EXPECT_EQ(blocks.stack_count->name, "L");
  EXPECT_EQ(blocks.inner->name.at(0).text, "Block");
  EXPECT_EQ(p->text(blocks.range), "stack{L}(Block)");
  // Items in source order.
  ASSERT_EQ(p->file.order.size(), 6u);
  EXPECT_EQ(p->file.order[2].kind, ast::ItemKind::Const);
  EXPECT_EQ(p->file.order[5].kind, ast::ItemKind::Module);
  EXPECT_EQ(p->file.order[5].index, 1u);
}

TEST(Parser, TutorialTrain) {
  auto p = parse(kTrain);
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::FnDecl& loss = p->file.fns.at(0);
  EXPECT_EQ(loss.args[0].name.text, "θ");
  EXPECT_EQ(loss.args[0].type->kind, ast::TypeKind::Params);
  EXPECT_EQ(loss.args[0].type->module.size(), 2u);
  EXPECT_EQ(loss.args[1].type->kind, ast::TypeKind::Tuple);
  EXPECT_EQ(loss.args[1].type->elements.size(), 2u);
  EXPECT_EQ(loss.body->lets[0].pattern->kind, ast::Pattern::Kind::Tuple);
  EXPECT_EQ(print_expr(*loss.body->children[0]), "mean(((t.Tower.apply(θ, x) - y) ^ 2))");

  const ast::OptimizerDecl& adamw = p->file.optimizers.at(0);
  EXPECT_EQ(adamw.name.text, "adamw");
  ASSERT_EQ(adamw.fields.size(), 3u);
  EXPECT_EQ(adamw.fields[0].type->elem, "f64");
  EXPECT_EQ(adamw.fields[0].value->number, 0.01);
  // `schedule : cosine(warmup = 20)` gives the value, no annotation.
  EXPECT_EQ(adamw.fields[2].type, nullptr);
  EXPECT_EQ(print_expr(*adamw.fields[2].value), "cosine(warmup = 20)");
  EXPECT_EQ(adamw.fields[2].value->args[0].kind, ast::Arg::Kind::Keyword);

  const ast::TrainingDecl& run = p->file.trainings.at(0);
  ASSERT_EQ(run.fields.size(), 4u);
  EXPECT_EQ(run.fields[2].key.text, "optimizer");
  EXPECT_EQ(run.fields[3].key.text, "epochs");
  EXPECT_EQ(run.fields[3].type->elem, "nat");
  ASSERT_EQ(run.data.size(), 3u);
  EXPECT_EQ(run.data[0].name.text, "stream");
  EXPECT_EQ(run.data[0].path, "data/pairs.qr.d");
  EXPECT_EQ(run.data[2].args[0].name->text, "B");
  EXPECT_EQ(p->text(*run.data_range), "data      = stream \"data/pairs.qr.d\" |> shuffle(seed = 3) |> batch(B = 8)");
  ASSERT_TRUE(run.checkpoint);
  EXPECT_EQ(run.checkpoint->every->integer, 50);
  EXPECT_EQ(run.checkpoint->unit, "steps");
  EXPECT_EQ(run.checkpoint->dir, "ckpt/");
  EXPECT_EQ(p->text(run.checkpoint->range), "checkpoint every 50 steps to \"ckpt/\"");
}

TEST(Parser, AsciiTwinsGiveTheSameTree) {
  const std::pair<const char*, const char*> pairs[] = {
      {kLinear, kLinearAscii}, {kNorm, kNormAscii}, {kTrain, kTrainAscii}};
  for (auto [unicode, ascii] : pairs) {
    auto u = parse(unicode);
    auto a = parse(ascii);
    ASSERT_FALSE(u->sink.has_errors()) << u->rendered();
    ASSERT_FALSE(a->sink.has_errors()) << a->rendered();
    EXPECT_EQ(u->printed(), a->printed());
  }
  // `R` names the real type only where an element type is read.
  auto p = parse("fn f(R : R[]) -> R[R] =\n  R as R\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->file.fns[0].args[0].name.text, "R");
  EXPECT_EQ(p->file.fns[0].result->elem, "real");
  EXPECT_EQ(p->file.fns[0].result->axes[0].size->name, "R");
  EXPECT_EQ(print_expr(*p->file.fns[0].body->children[0]), "(R as real)");
}

TEST(Parser, Precedence) {
  EXPECT_EQ(final_expr("-x^2"), "(-(x ^ 2))");
  EXPECT_EQ(final_expr("a + b · c"), "(a + (b · c))");
  EXPECT_EQ(final_expr("x · w as f32acc"), "((x · w) as f32acc)");
  EXPECT_EQ(final_expr("a + b as f32"), "((a + b) as f32)");
  EXPECT_EQ(final_expr("a - b * c ^ d"), "(a - (b * (c ^ d)))");
  EXPECT_EQ(final_expr("a - b - c"), "((a - b) - c)");
  EXPECT_EQ(final_expr("a / b * c"), "((a / b) * c)");
  EXPECT_EQ(final_expr("a ^ b ^ c"), "(a ^ (b ^ c))");
  EXPECT_EQ(final_expr("x ^ -1"), "(x ^ (-1))");
  EXPECT_EQ(final_expr("- -x"), "(-(-x))");
  EXPECT_EQ(final_expr("a + b < c * d"), "((a + b) < (c * d))");
  EXPECT_EQ(final_expr("a <= b"), "(a ≤ b)");
  EXPECT_EQ(final_expr("a ≥ b"), "(a ≥ b)");
  EXPECT_EQ(final_expr("a != b"), "(a ≠ b)");
  EXPECT_EQ(final_expr("a == b as bool"), "(a == (b as bool))");
  EXPECT_EQ(final_expr("x as bf16 as f32"), "((x as bf16) as f32)");
  EXPECT_EQ(final_expr("(a + b) * c"), "((a + b) * c)");
  EXPECT_EQ(final_expr("f(x).0.1"), "f(x).0.1");
  EXPECT_EQ(final_expr("-f(x)^2"), "(-(f(x) ^ 2))");
}

TEST(Parser, ExpressionForms) {
  EXPECT_EQ(final_expr("(a, b, c)"), "(a, b, c)");
  EXPECT_EQ(final_expr("()"), "()");
  EXPECT_EQ(final_expr("(a)"), "a");
  EXPECT_EQ(final_expr("true"), "true");
  EXPECT_EQ(final_expr("f(\"s\", false)"), "f(\"s\", false)");
  EXPECT_EQ(final_expr("split(axis model, x, heads: H, out = f32)"), "split(axis model, x, heads: H, out = f32)");
  EXPECT_EQ(final_expr("f()"), "f()");
  EXPECT_EQ(final_expr("numerics(high) { softmax(x) }"), "numerics(high) { softmax(x) }");
  EXPECT_EQ(final_expr("precision(bf16) {\n    let h = x · w\n    h + 1\n  }"),
            "precision(bf16) { let h = (x · w); (h + 1) }");
  EXPECT_EQ(final_expr("{ let a = 1\n let b : ℝ[] = a\n b }"), "{ let a = 1; let b : ℝ[] = a; b }");
  EXPECT_EQ(final_expr("batch.0"), "batch.0");
  EXPECT_EQ(final_expr("θ.w"), "θ.w");
  EXPECT_EQ(final_expr("axis"), "axis");  // `axis` alone is a name

  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  numerics(high) { x }\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::Expr& e = *p->file.fns[0].body->children[0];
  EXPECT_EQ(e.kind, ast::ExprKind::Numerics);
  EXPECT_EQ(e.name, "high");
  EXPECT_EQ(e.children[0]->kind, ast::ExprKind::Block);
  EXPECT_EQ(p->text(e.range), "numerics(high) { x }");
  EXPECT_EQ(p->text(e.children[0]->range), "{ x }");
}

TEST(Parser, CallArgumentKindsAndRanges) {
  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  g(axis a, k = 1, n: N, x + 1)\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::Expr& call = *p->file.fns[0].body->children[0];
  ASSERT_EQ(call.kind, ast::ExprKind::Call);
  EXPECT_EQ(call.children[0]->name, "g");
  ASSERT_EQ(call.args.size(), 4u);
  EXPECT_EQ(call.args[0].kind, ast::Arg::Kind::Axis);
  EXPECT_EQ(call.args[1].kind, ast::Arg::Kind::Keyword);
  EXPECT_EQ(call.args[2].kind, ast::Arg::Kind::AxisSize);
  EXPECT_EQ(call.args[3].kind, ast::Arg::Kind::Positional);
  EXPECT_EQ(p->text(call.args[0].range), "axis a");
  EXPECT_EQ(p->text(call.args[1].range), "k = 1");
  EXPECT_EQ(p->text(call.args[2].range), "n: N");
  EXPECT_EQ(p->text(call.args[3].range), "x + 1");
  EXPECT_EQ(p->text(call.range), "g(axis a, k = 1, n: N, x + 1)");
  EXPECT_EQ(p->text(p->file.fns[0].body->range), "g(axis a, k = 1, n: N, x + 1)");
}

TEST(Parser, RenameArguments) {
  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  rename(x, t → s, u -> v)\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::Expr& call = *p->file.fns[0].body->children[0];
  ASSERT_EQ(call.args.size(), 3u);
  for (size_t k : {1u, 2u}) {
    EXPECT_EQ(call.args[k].kind, ast::Arg::Kind::Rename);
    ASSERT_TRUE(call.args[k].value);
    EXPECT_EQ(call.args[k].value->kind, ast::ExprKind::Name);
  }
  EXPECT_EQ(call.args[1].name->text, "t");
  EXPECT_EQ(call.args[1].value->name, "s");
  EXPECT_EQ(call.args[2].name->text, "u");
  EXPECT_EQ(call.args[2].value->name, "v");
  EXPECT_EQ(p->text(call.args[1].range), "t → s");
  EXPECT_EQ(p->text(call.args[2].range), "u -> v");
  auto bad = parse("fn f(x : ℝ[]) -> ℝ[] =\n  rename(x, t → 3)\n");
  EXPECT_TRUE(bad->sink.has_errors());
}

TEST(Parser, Declarations) {
  auto p = parse(R"(dim B T
const eps : f64 = 1e-5
const on : bool = true
module Attn{D H : dim} {
  param wq : ℝ[D, D] init = normal(0.02) numerics high
  param emb : ℝ[V, D] init = uniform(-0.1, 0.1) frozen numerics high
  param s : ℝ[]
  use inner : stack{2 * L}(stack{L}(norm.RMSNorm{D}))
  fn go(x : i32[B, T], k : key, m : bool[B], p : params Attn{D, H}, n : nat = 3) -> (ℝ[B, heads: H, D / H], i64[]) =
    let (a, _) = f(x)
    let ((c, d), e) = g(x)
    (a, c)
}
)");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->file.dims[0].names.size(), 2u);
  EXPECT_EQ(p->file.consts[0].type->elem, "f64");
  EXPECT_EQ(p->file.consts[1].value->kind, ast::ExprKind::Bool);
  const ast::ModuleDecl& m = p->file.modules.at(0);
  EXPECT_TRUE(m.params[0].numerics_high);
  EXPECT_FALSE(m.params[0].frozen);
  EXPECT_TRUE(m.params[1].numerics_high);
  EXPECT_TRUE(m.params[1].frozen);
  EXPECT_EQ(print_expr(*m.params[1].init), "uniform((-0.1), 0.1)");
  EXPECT_EQ(m.params[2].init, nullptr);
  EXPECT_TRUE(m.params[2].type->axes.empty());
  EXPECT_EQ(print_modref(m.uses[0].module), "stack{(2 * L)}(stack{L}(norm.RMSNorm{D}))");
  const ast::FnDecl& go = m.fns.at(0);
  EXPECT_EQ(go.args[0].type->elem, "i32");
  EXPECT_EQ(go.args[1].type->kind, ast::TypeKind::Key);
  EXPECT_EQ(go.args[2].type->elem, "bool");
  EXPECT_EQ(go.args[2].type->kind, ast::TypeKind::Tensor);
  EXPECT_EQ(print_type(*go.args[3].type), "params Attn{D, H}");
  EXPECT_EQ(go.args[4].type->kind, ast::TypeKind::Scalar);
  EXPECT_EQ(go.args[4].default_value->integer, 3);
  EXPECT_EQ(print_type(*go.result), "(ℝ[B, heads: H, (D / H)], i64[])");
  EXPECT_EQ(go.body->lets[0].pattern->elements[1]->kind, ast::Pattern::Kind::Wildcard);
  EXPECT_EQ(go.body->lets[1].pattern->elements[0]->kind, ast::Pattern::Kind::Tuple);
  EXPECT_EQ(p->text(go.body->lets[1].pattern->range), "((c, d), e)");
  EXPECT_EQ(p->text(go.body->lets[1].range), "let ((c, d), e) = g(x)");
}

TEST(Parser, SizeParametersOfATopLevelFunction) {
  // Three spellings of one list: the module header's, with commas, with `: dim`.
  auto p = parse(R"(fn a{N}(x : ℝ[..., n: N]) -> ℝ[..., n: N] = x
fn b{N M}(x : ℝ[N, M]) -> ℝ[N] = sum(x)
fn c{N, M}(x : ℝ[N, M]) -> ℝ[N] = sum(x)
fn d{N M : dim}(x : ℝ[N, M]) -> ℝ[N] = sum(x)
)");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  ASSERT_EQ(p->file.fns.size(), 4u);
  EXPECT_EQ(p->file.fns[0].size_params.size(), 1u);
  for (size_t i = 1; i < 4; ++i) {
    ASSERT_EQ(p->file.fns[i].size_params.size(), 2u);
    EXPECT_EQ(p->file.fns[i].size_params[0].text, "N");
    EXPECT_EQ(p->file.fns[i].size_params[1].text, "M");
    EXPECT_EQ(p->text(p->file.fns[i].size_params[1].range), "M");
  }
  // Printed in the module header's spelling, without `: dim`.
  EXPECT_NE(p->printed().find("fn a{N}(x : ℝ[..., n: N]) -> ℝ[..., n: N] ="), std::string::npos) << p->printed();
  EXPECT_NE(p->printed().find("fn c{N M}(x : ℝ[N, M]) -> ℝ[N] ="), std::string::npos) << p->printed();
  EXPECT_NE(p->printed().find("fn d{N M}(x : ℝ[N, M]) -> ℝ[N] ="), std::string::npos) << p->printed();
}

TEST(Parser, ParamsOfAStack) {
  auto p = parse("fn f(θ : params stack{L}(Block)) -> ℝ[] =\n  g(θ)\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  const ast::TypeExpr& t = *p->file.fns[0].args[0].type;
  ASSERT_TRUE(t.module_ref);
  EXPECT_TRUE(t.module_ref->is_stack);
  EXPECT_TRUE(t.module.empty());
  EXPECT_EQ(print_type(t), "params stack{L}(Block)");
}

TEST(Parser, LinesContinueAfterOperatorsInsideBracketsAndBeforePipes) {
  auto p = parse(R"(fn f(x : ℝ[],
     y : ℝ[]) ->
     ℝ[] =
  let a = x +
    y
  let b = g(a,
            a)
  a ·
    b
training run {
  data = stream "d"
    |> shuffle(seed = 3)

    |> batch(B = 8)
  epochs : nat =
    10
}
)");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->printed(),
            "fn f(x : ℝ[], y : ℝ[]) -> ℝ[] =\n"
            "  let a = (x + y)\n"
            "  let b = g(a, a)\n"
            "  (a · b)\n"
            "training run\n"
            "  epochs : nat = 10\n"
            "  data = stream \"d\" |> shuffle(seed = 3) |> batch(B = 8)\n");
}

TEST(Parser, BlankLinesAndCommentsAnywhere) {
  auto p = parse("\n\n-- c\nfn f(x : ℝ[]) -> ℝ[] =   -- c\n\n  let a = x  -- c\n\n  -- c\n  a\n\n\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->printed(), "fn f(x : ℝ[]) -> ℝ[] =\n  let a = x\n  a\n");
}

TEST(Parser, NumbersKeepTheirSpellingAndValue) {
  auto p = parse("const a : int = 9223372036854775807\nconst b : f64 = 1.5E3\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  EXPECT_EQ(p->file.consts[0].value->integer, INT64_MAX);
  EXPECT_TRUE(p->file.consts[0].value->is_integer);
  EXPECT_EQ(p->file.consts[1].value->name, "1.5E3");
  EXPECT_EQ(p->file.consts[1].value->number, 1500.0);
  EXPECT_FALSE(p->file.consts[1].value->is_integer);
}

TEST(Parser, TrainingRunAcceptsAnySetting) {
  auto p = parse("training run {\n  seed = 7\n  log_every = 10\n  precision_policy : bf16\n}\n");
  ASSERT_FALSE(p->sink.has_errors()) << p->rendered();
  ASSERT_EQ(p->file.trainings[0].fields.size(), 3u);
  EXPECT_FALSE(p->file.trainings[0].data_range);
  EXPECT_FALSE(p->file.trainings[0].checkpoint);
}

}  // namespace
}  // namespace quire::syntax
