// The parser on bad input: every test asserts each error's code and line:col,
// that recovery finds the later errors, and that nothing crashes or hangs.

#include <gtest/gtest.h>

#include <random>

#include "quire/syntax/parser.h"
#include "quire/syntax/syntax_testing.h"

namespace quire::syntax {
namespace {

using testing::parse;
using Errors = std::vector<std::string>;

TEST(ParserErrors, SeveralErrorsInOneFileAreAllReported) {
  auto p = parse(R"(dim B
const D : nat = )
module M {
  param w : ℝ[D  init = ones
  fn f(x : ℝ[B]) -> ℝ[B] =
    let a = (x +
    let b = a * 2
    b
}
fn g(x : ℝ[B]) -> ℝ[B] =
  x +
)");
  EXPECT_EQ(p->errors(), (Errors{"2:17 E0201", "4:18 E0201", "6:17 E0201", "11:6 E0201"})) << p->rendered();
  // Recovery kept what it could read.
  ASSERT_EQ(p->file.modules.size(), 1u);
  EXPECT_EQ(p->file.modules[0].fns.at(0).body->lets.size(), 2u);
  EXPECT_EQ(p->file.fns.size(), 1u);
  EXPECT_TRUE(p->rendered().starts_with(
            "t.qr:2:17: error[E0201]: expected an expression, found `)`\n"
            "    2 | const D : nat = )\n"
            "      |                 ^\n"
            "t.qr:4:18: error[E0201]: expected `,` or `]` to close the `[` opened at 4:14, found keyword `init`\n"));
}

TEST(ParserErrors, MissingCloserNamesTheOpener) {
  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  mean(axis model, (x + 1)\n");
  EXPECT_EQ(p->errors(), (Errors{"2:27 E0201"}));
  EXPECT_EQ(p->rendered(),
            "t.qr:2:27: error[E0201]: expected `,` or `)` to close the `(` opened at 2:7, found end of file\n"
            "    2 |   mean(axis model, (x + 1)\n"
            "      |                           ^\n");
  auto q = parse("fn f(x : ℝ[]) -> ℝ[] =\n  (x + 1\nfn g(x : ℝ[]) -> ℝ[] = x\n");
  EXPECT_EQ(q->errors(), (Errors{"2:9 E0201"}));
  EXPECT_EQ(q->sink.all()[0].message, "expected `)` to close the `(` opened at 2:3, found end of line");
  EXPECT_EQ(q->file.fns.size(), 2u);
}

TEST(ParserErrors, HundredThousandOpenParenthesesAreOneError) {
  auto p = parse("const D : nat = " + std::string(100000, '(') + "\n");
  EXPECT_EQ(p->errors(), (Errors{"1:217 E0202"}));
  auto q = parse("const D : nat = " + std::string(100000, '(') + "1" + std::string(100000, ')') +
                 "\nconst E : nat = 2\n");
  EXPECT_EQ(q->errors(), (Errors{"1:217 E0202"}));
  EXPECT_EQ(q->file.consts.size(), 2u);  // the next line is read
}

TEST(ParserErrors, EveryRecursionIsBounded) {
  // 20 000 levels: 100 times the limit, far past what the stack would survive
  // unguarded in a sanitizer build.
  constexpr int kLevels = 20000;
  std::string many_minus;
  for (int i = 0; i < kLevels; ++i) many_minus += "- ";
  std::string many_powers;
  for (int i = 0; i < kLevels; ++i) many_powers += "^x";
  std::string many_stacks;
  for (int i = 0; i < kLevels; ++i) many_stacks += "stack{2}(";
  std::string many_calls;
  for (int i = 0; i < kLevels; ++i) many_calls += "f(";
  const std::string cases[] = {
      "fn f(x : ℝ[]) -> ℝ[] = " + std::string(kLevels, '{') + "\n",
      "fn f(x : ℝ[]) -> ℝ[] = " + many_minus + "x\n",
      "fn f(x : ℝ[]) -> ℝ[] = x" + many_powers + "\n",
      "fn f(x : ℝ[]) -> ℝ[] = " + many_calls + "x\n",
      "fn f(x : " + std::string(kLevels, '(') + ") -> ℝ[] = x\n",
      "fn f(x : ℝ[" + std::string(kLevels, '(') + "]) -> ℝ[] = x\n",
      "fn f(x : ℝ[]) -> ℝ[] =\n  let " + std::string(kLevels, '(') + " = x\n  x\n",
      "module M {\n  use b : " + many_stacks + "\n}\n",
  };
  for (const std::string& text : cases) {
    auto p = parse(text);
    ASSERT_GE(p->errors().size(), 1u);
    EXPECT_EQ(p->sink.all()[0].code, "E0202");
    EXPECT_LE(p->errors().size(), 2u) << p->rendered();
  }
}

/// `fn f(x : ℝ[4]) -> ℝ[4] = x<link>x<link>…` with `links` operators.
std::string chain(const std::string& link, size_t links) {
  std::string body = "x";
  for (size_t i = 0; i < links; ++i) body += link;
  return "fn f(x : ℝ[4]) -> ℝ[4] = " + body + "\n";
}

TEST(ParserErrors, AChainOfOperatorsPastTheHeightLimitIsOneError) {
  // 150 000 terms used to overflow the stack when the tree was freed, although
  // no single production nests: a chain is built by a loop.
  for (const char* link : {" + x", " * x", " as f32", ".0"}) {
    auto p = parse(chain(link, 150000) + "fn g(x : ℝ[4]) -> ℝ[4] = x\n");
    EXPECT_EQ(p->errors(), (Errors{"1:26 E0202"})) << link;
    EXPECT_NE(p->rendered().find("expression too deep: its tree has 150001 levels, more than 5000"),
              std::string::npos)
        << p->rendered();
    EXPECT_EQ(p->file.fns.size(), 2u);  // the next item is read
  }
}

TEST(ParserErrors, AChainJustUnderTheHeightLimitIsFine) {
  auto p = parse(chain(" + x", kMaxExprHeight - 1));
  EXPECT_FALSE(p->sink.has_errors()) << p->rendered();
}

TEST(ParserErrors, NestingJustUnderTheLimitIsFine) {
  auto p = parse("const D : nat = " + std::string(150, '(') + "1" + std::string(150, ')') + "\n");
  EXPECT_FALSE(p->sink.has_errors()) << p->rendered();
}

TEST(ParserErrors, RandomBytesGiveBoundedErrors) {
  std::mt19937 rng(7);
  for (int round = 0; round < 30; ++round) {
    std::string bytes(10000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    auto p = parse(bytes);
    EXPECT_TRUE(p->sink.has_errors());
    EXPECT_LE(p->sink.error_count(), 50u);
  }
}

TEST(ParserErrors, RandomTokenSoupTerminates) {
  // Valid tokens in random order reach far more of the parser than random bytes.
  const char* words[] = {"fn", "(", ")", "[", "]", "{", "}", ",", ":", "=", "->", "let", "module", "param",
                         "use", "x", "ℝ", "1", "2.5", "+", "·", "^", "-", "as", "\n", "\n", "stack", "params",
                         "training", "run", "optimizer", "data", "|>", "\"s\"", ".", "...", "axis", "numerics",
                         "import", "dim", "const", "nat", "init", "frozen", "<", "checkpoint", "every", "to"};
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += std::string(words[rng() % std::size(words)]) + " ";
    auto p = parse(text);
    EXPECT_LE(p->sink.error_count(), 50u);
    (void)print_ast(p->file);  // placeholders print
  }
}

TEST(ParserErrors, HugeIntegerLiteral) {
  auto p = parse("const N : int = 99999999999999999999\n");
  EXPECT_EQ(p->errors(), (Errors{"1:17 E0102"}));
  EXPECT_EQ(p->file.consts.at(0).value->integer, 0);
}

TEST(ParserErrors, DeclarationsInTheWrongPlace) {
  // At top level the parser skips to the next item: `use` on line 3 is not reported again.
  auto p = parse(
      "dim B\nparam w : ℝ[B]\nuse n : Norm\ndim T\nlet x = 1\nmodule M {\n  let y = 2\n  param v : ℝ[B]\n}\n");
  EXPECT_EQ(p->errors(), (Errors{"2:1 E0203", "5:1 E0203", "7:3 E0203"})) << p->rendered();
  EXPECT_EQ(p->sink.all()[0].message, "`param` can only appear inside a `module`");
  EXPECT_EQ(p->file.modules.at(0).params.size(), 1u);
}

TEST(ParserErrors, SizeParameters) {
  // Only a top-level function takes them; the module function is still read.
  auto p = parse("module M {\n  fn f{N}(x : ℝ[N]) -> ℝ[N] = x\n  fn g(x : ℝ[3]) -> ℝ[3] = x\n}\n");
  EXPECT_EQ(p->errors(), (Errors{"2:8 E0203"})) << p->rendered();
  EXPECT_EQ(p->sink.all()[0].message, "a module's function cannot declare size parameters");
  EXPECT_EQ(p->file.modules.at(0).fns.size(), 2u);
  // An empty list, a trailing comma, `:` without `dim`, a missing `}`: the
  // header is unreadable, so its body is skipped.
  auto q = parse(
      "fn a{}(x : ℝ[3]) -> ℝ[3] = x\nfn b{N,}(x : ℝ[N]) -> ℝ[N] = x\nfn c{N : nat}(x : ℝ[N]) -> ℝ[N] = x\n"
      "fn d{N(x : ℝ[N]) -> ℝ[N] = x\nfn e{N}(x : ℝ[N]) -> ℝ[N] = x\n");
  EXPECT_EQ(q->errors(), (Errors{"1:6 E0201", "2:8 E0201", "3:10 E0201", "4:7 E0201"})) << q->rendered();
  EXPECT_EQ(q->sink.all()[3].message, "expected `}` to close the `{` opened at 4:5, found `(`");
  EXPECT_EQ(q->file.fns.size(), 5u);
  EXPECT_EQ(q->file.fns[4].size_params.size(), 1u);
}

TEST(ParserErrors, UnknownTopLevelItems) {
  // After E0204 the parser skips to the next item (`foo` is not reported again).
  auto p = parse("dim B\nfn f(x : ℝ[B]) -> ℝ[B] =\n  x + 1\n  x + 2\nfoo\ndim T\n}\nconst C : nat = 1\n");
  EXPECT_EQ(p->errors(), (Errors{"4:3 E0204", "7:1 E0204"})) << p->rendered();
  EXPECT_EQ(p->file.consts.size(), 1u);
  EXPECT_EQ(p->file.dims.size(), 2u);
}

TEST(ParserErrors, ForgottenClosingBraceOfAModule) {
  auto p = parse("module M {\n  param w : ℝ[4]\nmodule N {\n  param v : ℝ[4]\n}\n");
  EXPECT_EQ(p->errors(), (Errors{"3:1 E0201"})) << p->rendered();
  EXPECT_EQ(p->sink.all()[0].message, "expected `}` to close the `{` opened at 1:10, found keyword `module`");
  EXPECT_EQ(p->file.modules.size(), 2u);
}

TEST(ParserErrors, BrokenFunctionHeaderSkipsItsBody) {
  auto p = parse("module M {\n  fn f( -> ℝ[] =\n    let a = 1\n    a\n  fn g(x : ℝ[]) -> ℝ[] = x\n}\n");
  EXPECT_EQ(p->errors(), (Errors{"2:9 E0201"})) << p->rendered();
  EXPECT_EQ(p->file.modules.at(0).fns.size(), 2u);
}

TEST(ParserErrors, BodiesNeedAFinalExpression) {
  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  let a = x\n\nfn g(x : ℝ[]) -> ℝ[] = { let b = x }\n");
  EXPECT_EQ(p->errors(), (Errors{"4:1 E0201", "4:36 E0201"})) << p->rendered();
  EXPECT_EQ(p->sink.all()[0].message, "expected the final expression after the `let` lines, found keyword `fn`");
}

TEST(ParserErrors, ComparisonsDoNotChain) {
  auto p = parse("fn f(x : ℝ[]) -> bool =\n  a < b < c\n");
  EXPECT_EQ(p->errors(), (Errors{"2:9 E0201"}));
}

TEST(ParserErrors, LexicalErrorsAreNotEchoedByTheParser) {
  auto p = parse("import \"a.qr as t\ndim B;\nconst C : nat = 1\n");
  EXPECT_EQ(p->errors(), (Errors{"1:8 E0103", "2:6 E0101"})) << p->rendered();
  EXPECT_EQ(p->file.consts.size(), 1u);
}

TEST(ParserErrors, TrainingAndOptimizerErrors) {
  auto p = parse(R"(optimizer adamw {
  lr : f64 0.01
  bogus
}
training {
}
training run {
  data = stream "a" |> batch(B = 8)
  data = stream "b"
  checkpoint every 50 steps "ckpt"
  checkpoint every 10 steps to "c"
}
)");
  EXPECT_EQ(p->errors(), (Errors{"2:12 E0201", "3:3 E0201", "5:10 E0201", "9:3 E0205", "10:29 E0201", "11:3 E0205"}))
      << p->rendered();
}

TEST(ParserErrors, MissingTypeAndMissingPieces) {
  auto p = parse("const D : real = 4\nfn f(x : foo) -> ℝ = x\nmodule M{D : dim {\n}\n");
  EXPECT_EQ(p->errors(), (Errors{"1:11 E0201", "2:10 E0201", "3:18 E0201"}))
      << p->rendered();
}

}  // namespace
}  // namespace quire::syntax
