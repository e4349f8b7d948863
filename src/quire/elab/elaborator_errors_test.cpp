// Elaboration of bad programs: every error is a diagnostic with its code, its
// position and a message that names what is wrong (never a crash), and
// elaboration goes on to report the next one.

#include <gtest/gtest.h>

#include "quire/elab/elab_testing.h"
#include "quire/elab/elaborator.h"
#include "quire/syntax/parser.h"

namespace quire::elab {
namespace {

using testing::elaborate_files;
using testing::elaborate_text;
using testing::kLinear;

/// Expects exactly one error, with this code at line:col and the fragment in its message.
#define EXPECT_ONE_ERROR(e, code, line, col, fragment)                         \
  do {                                                                         \
    EXPECT_EQ((e)->errors().size(), 1u) << (e)->rendered();                    \
    EXPECT_TRUE((e)->has_error(code, line, col, fragment)) << (e)->rendered(); \
  } while (0)

TEST(ElaborateErrors, UnknownNamesSuggestTheClosest) {
  auto e = elaborate_text("fn f(input : ℝ[3]) -> ℝ[3] =\n  let scaled = input * 2.0\n  scaeld + inptu\n");
  EXPECT_EQ(e->errors().size(), 2u) << e->rendered();  // both operands are reported, the sum is not
  EXPECT_TRUE(e->has_error("E0303", 3, 3, "unknown name `scaeld`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 3, 12, "unknown name `inptu`")) << e->rendered();
  EXPECT_EQ(e->sink.all()[0].hint, "did you mean `scaled`?");
  EXPECT_EQ(e->sink.all()[1].hint, "did you mean `input`?");
  auto far = elaborate_text("fn f(x : ℝ[3]) -> ℝ[3] = completely_different\n");
  EXPECT_ONE_ERROR(far, "E0303", 1, 26, "unknown name `completely_different`");
  EXPECT_EQ(far->hint_of("E0303"), "");
  // Members of a module are suggested inside its functions.
  auto m = elaborate_text("module M {\n  param weight : ℝ[3]\n  fn f(x : ℝ[3]) -> ℝ[3] = x * wieght\n}\n");
  EXPECT_ONE_ERROR(m, "E0303", 3, 32, "unknown name `wieght`");
  EXPECT_EQ(m->hint_of("E0303"), "did you mean `weight`?");
}

TEST(ElaborateErrors, NamesThatAreNotValues) {
  auto e = elaborate_text(R"(dim B
module M {
  param w : ℝ[3]
}
fn f(x : ℝ[3]) -> ℝ[3] = x * B
fn g(x : ℝ[3]) -> ℝ[3] = x * M
fn h(x : ℝ[3]) -> ℝ[3] = x * f
fn k(x : ℝ[3]) -> ℝ[3] = x(2.0)
)");
  EXPECT_EQ(e->errors().size(), 4u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 5, 30, "`B` is a dimension, not a value")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 30, "is a module, not a value")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 7, 30, "is a function, not a value")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 8, 26, "this is not a function")) << e->rendered();
}

TEST(ElaborateErrors, ArityAndKeywords) {
  auto e = elaborate_text(R"(fn g(x : ℝ[3], s : f64 = 2.0) -> ℝ[3] = x * real(s)
fn a(x : ℝ[3]) -> ℝ[3] = g(x, 1.0, 2.0)
fn b(x : ℝ[3]) -> ℝ[3] = g(x, scale = 1.0)
fn c(x : ℝ[3]) -> ℝ[3] = g()
fn d(x : ℝ[3]) -> ℝ[3] = g(x, x = x)
fn e(x : ℝ[3]) -> ℝ[3] = exp(x, x)
fn f(x : ℝ[3]) -> ℝ[] = sum(x, seed = 1)
fn h(x : ℝ[3]) -> ℝ[3] = g(axis n, x)
)");
  EXPECT_EQ(e->errors().size(), 7u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 2, 36, "`g` takes 2 argument(s)")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 3, 31, "`g` has no argument `scale`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 4, 26, "`g` needs its argument `x`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 5, 31, "argument `x` is given twice")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 6, 26, "`exp` takes 1 value argument(s), given 2")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 7, 32, "`sum` has no argument `seed`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 8, 28, "`g` takes values and `name = value` arguments")) << e->rendered();
}

TEST(ElaborateErrors, WrongAxisNamesListTheAxes) {
  auto e = elaborate_text(R"(fn f(x : ℝ[b: 3, m: 4]) -> ℝ[b: 3] = sum(axis model, x)
fn g(x : ℝ[b: 3, 4]) -> ℝ[b: 3, 4] = transpose(x, axis b, axis c)
fn h(x : ℝ[b: 3, m: 4]) -> ℝ[b: 3] = mean(axis m, axis m, x)
)");
  EXPECT_EQ(e->errors().size(), 3u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 1, 47, "sum: ℝ[b: 3, m: 4] has no axis named `model`")) << e->rendered();
  EXPECT_EQ(e->hint_of("E0403"), "its axes: `b`, `m`");
  EXPECT_EQ(e->sink.all()[1].hint, "its axes: `b`, positional 1");
  EXPECT_TRUE(e->has_error("E0403", 2, 64, "transpose: ℝ[b: 3, 4] has no axis named `c`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 3, 51, "axis `m` is named twice")) << e->rendered();
}

TEST(ElaborateErrors, ShapeMismatchAtCallsNamesTheSizes) {
  auto e = elaborate_files({{"main.qr", R"(import "lin.qr" as lin
fn f(θ : params lin.Linear{3, 4}, x : ℝ[2, 5]) -> ℝ[2, 4] = lin.Linear.apply(θ, x)
fn g(θ : params lin.Linear{3, 4}, x : ℝ[2, 3]) -> ℝ[2, 5] = lin.Linear.apply(θ, x)
fn h(θ : params lin.Linear{3, 4}, x : ℝ[2, 3]) -> ℝ[2, 4] = lin.Linear.apply(x, θ)
)"},
                            {"lin.qr", kLinear}});
  EXPECT_EQ(e->errors().size(), 3u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 2, 81,
                           "argument `x` of `Linear.apply` should be ℝ[..., 3], but is ℝ[2, 5]: axis 1 has size 5 "
                           "where 3 is declared"))
      << e->rendered();
  EXPECT_TRUE(e->has_error(
      "E0401", 3, 61, "the function's result should be ℝ[2, 5], but is ℝ[2, 4]: axis 1 has size 4 where 5 is declared"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 4, 78, "`Linear.apply` takes the parameters of `Linear` first")) << e->rendered();
}

TEST(ElaborateErrors, BroadcastAndContractionMismatches) {
  auto e = elaborate_text(R"(dim B
fn a(x : ℝ[batch: B, model: 4], y : ℝ[batch: B, hidden: 4]) -> ℝ[batch: B, model: 4] = x + y
fn b(x : ℝ[2, 5], w : ℝ[4, 3]) -> ℝ[2, 3] = x · w
fn c(x : ℝ[batch: B], y : ℝ[batch: 3]) -> ℝ[batch: B] = x * y
fn d(x : ℝ[k: 3, i: 2], y : ℝ[k: 4, j: 2]) -> ℝ[i: 2, j: 2] = contract(axis k, x, y)
fn e(x : ℝ[..., 4], w : ℝ[..., 4]) -> ℝ[...] = x · w
)");
  EXPECT_EQ(e->errors().size(), 5u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 2, 88,
                           "cannot broadcast ℝ[batch: B, model: 4] with ℝ[batch: B, hidden: 4]: axis `model` (size 4) "
                           "cannot align with axis `hidden` (size 4)"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 3, 45, "`·` contracts the last axis of size 5 with the first axis of size 4"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 4, 57, "axis `batch` (size 3) does not match axis `batch` (size B)"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 5, 63, "contract over `k`: sizes 3 and 4")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 48, "`·` contracts the right operand's first axis; ℝ[..., 4] has `...` there"))
      << e->rendered();
}

TEST(ElaborateErrors, AxisNamesStayUnique) {
  auto e = elaborate_text(R"(fn f(x : ℝ[..., 4]) -> ℝ[..., batch: 4] = x
fn g(x : ℝ[batch: 2, 4]) -> ℝ[] = sum(axis batch, f(x))
fn h(t : ℝ[v: 5, model: 2], ids : i32[model: 3]) -> ℝ[] = sum(gather(axis v, t, ids))
fn k(x : ℝ[batch: 2, 4], w : ℝ[4, batch: 3]) -> ℝ[] = sum(x · w)
fn m(c : bool[2, 3], x : ℝ[c: 3], y : ℝ[d: 3]) -> ℝ[2, 3] = where(c, x, y)
fn n(x : ℝ[batch: 2, 4]) -> ℝ[batch: 2, batch: 4] = x
)");
  EXPECT_EQ(e->errors().size(), 5u) << e->rendered();
  EXPECT_TRUE(
      e->has_error("E0403", 2, 51, "the result of `f` would be ℝ[batch: 2, batch: 4], with two axes named `batch`"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 3, 63, "the result would have two axes named `model`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 4, 59, "the product would have two axes named `batch`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 5, 61, "axis `c` (size 3) cannot align with axis `d` (size 3)")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 41, "axis `batch` appears twice in one type")) << e->rendered();
}

TEST(ElaborateErrors, BooleansAndNumbersDoNotMix) {
  auto e = elaborate_text(R"(fn a(x : ℝ[3]) -> bool[3] = (x > 0.0) == 1.0
fn b(x : ℝ[3]) -> ℝ[3] = where(x > 0.0, x > 1.0, x)
fn c(x : ℝ[3]) -> bool[3] = max(x > 0.0, x > 1.0)
fn d(x : ℝ[3]) -> bool[3] = (x > 0.0) < (x > 1.0)
fn e(i : i32[k: 3], j : i32[k: 3]) -> ℝ[] = contract(axis k, i, j)
fn f(x : ℝ[3]) -> ℝ[3] = (x > 0.0) + 1.0
fn g(x : ℝ[3]) -> ℝ[3] = where(x, x, x)
fn h(x : ℝ[3]) -> ℝ[3] = exp(x > 0.0)
fn k(x : ℝ[3]) -> bool[3] = not(x)
fn ok1(x : ℝ[3]) -> bool[3] = (x > 0.0) == true
fn ok2(x : ℝ[3]) -> bool[3] = where(x > 0.0, x > 1.0, false)
fn ok3(i : i32[3]) -> bool[3] = i > 0
)");
  EXPECT_EQ(e->errors().size(), 9u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 1, 29, "`==` compares a boolean with a number")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 2, 26, "`where` chooses between bool[3] and ℝ[3]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 3, 29, "`max` needs numbers, not booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 4, 29, "`<` does not order booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 5, 45, "`contract` multiplies real tensors")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 6, 26, "`+` needs numbers, not booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 7, 32, "`where` needs a boolean condition, given ℝ[3]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 8, 26, "`exp` takes a real tensor, given bool[3]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 9, 29, "`not` takes a boolean tensor")) << e->rendered();
}

TEST(ElaborateErrors, BooleanLiteralsAreBooleans) {
  auto e = elaborate_text(R"(const FLAG : bool = true
fn a(x : ℝ[3]) -> ℝ[3] = x * true
fn b(x : ℝ[3]) -> ℝ[3] = x + (true + 1)
fn c(x : ℝ[3]) -> ℝ[3] = x ^ true
fn d(x : ℝ[3]) -> ℝ[3] = x * -true
fn f(x : ℝ[3], flag : bool) -> ℝ[3] = x * flag
fn ok1(x : ℝ[3], flag : bool) -> ℝ[3] = where(flag, x, 0.0) + real(flag) + real(true) + where(FLAG, x, -x)
fn ok2(x : ℝ[3], flag : bool) -> bool[3] = (x > 0.0) == flag
fn ok3() -> bool[] = true == false
)");
  EXPECT_EQ(e->errors().size(), 5u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 2, 26, "`*` needs numbers, not booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 3, 30, "`+` needs numbers, not booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 4, 26, "`^` needs numbers, not booleans")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 5, 30, "cannot negate a boolean tensor")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 6, 39, "`*` needs numbers, not booleans")) << e->rendered();
  EXPECT_EQ(e->core_of("ok3"),
            "fn ok3() -> bool[] {\n"
            "  %1 : ℝ[] = 1\n"
            "  %2 : bool[] = cast bool %1\n"
            "  %3 : ℝ[] = 0\n"
            "  %4 : bool[] = cast bool %3\n"
            "  %5 : bool[] = eq %2, %4\n"
            "  return %5\n"
            "}\n");
}

TEST(ElaborateErrors, ZeroAndNegativeSizes) {
  auto e = elaborate_text(R"(const Z : nat = 0
const N : int = -2
fn f(x : ℝ[Z]) -> ℝ[] = sum(x)
fn g(x : ℝ[N]) -> ℝ[] = sum(x)
module Linear{In Out : dim} {
  param w : ℝ[In, Out]
}
module M {
  use l : Linear{0, 4}
  use k : Linear{4, 4 - 5}
  use s : stack{0}(Linear{4, 4})
}
module Heads{D H : dim} {
  param w : ℝ[D / H, H]
}
module P {
  use h : Heads{7, 2}
}
fn split_bad(x : ℝ[a: 6]) -> ℝ[] = sum(split(axis a, x, p: 0, q: 3))
fn draw_bad(k : key) -> ℝ[] = sum(uniform(k, n: 0))
fn h(x : ℝ[2 - 3]) -> ℝ[] = sum(x)
)");
  EXPECT_EQ(e->errors().size(), 9u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 3, 12, "an axis must have a positive size, not 0")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 4, 12, "an axis must have a positive size, not -2")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 9, 18, "a dimension must be positive, not 0")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 10, 21, "a dimension must be positive, not -1")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 11, 17, "a stack needs at least one copy, not 0")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 17, 3, "`Heads{7, 2}` gives parameter `w` the size 7 / 2")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 19, 57, "a part's size is positive")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 20, 46, "an axis must have a positive size")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 21, 12, "an axis must have a positive size, not -1")) << e->rendered();
}

TEST(ElaborateErrors, NestedInstancesAreCheckedWhereTheyFixTheirSizes) {
  auto e = elaborate_text(R"(module Heads{D H : dim} {
  param w : ℝ[D / H, H]
}
module Outer{D H : dim} {
  use heads : stack{2}(Heads{D, H})
}
module Top {
  use ok : Outer{8, 4}
  use bad : Outer{6, 4}
}
fn f(θ : params Outer{9, 3}, φ : params Outer{10, 4}) -> ℝ[] = 0.0
)");
  EXPECT_EQ(e->errors().size(), 2u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 9, 3, "`Outer{6, 4}` gives parameter `heads.w` the size 6 / 4")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 11, 34, "`Outer{10, 4}` gives parameter `heads.w` the size 10 / 4"))
      << e->rendered();
}

TEST(ElaborateErrors, TensorsBeyondTheElementLimit) {
  auto e = elaborate_text(R"(fn f(k : key) -> ℝ[] = sum(uniform(k, n: 1000000000000, m: 1000000000000))
fn g(x : ℝ[1048576, 1048577]) -> ℝ[] = sum(x)
fn h(i : i32[1048576]) -> ℝ[] = sum(one_hot(i, v: 1048577))
module L{N : dim} {
  param w : ℝ[N, N]
}
module M {
  use big : stack{1048576}(L{1048576})
}
fn ok(x : ℝ[1048576, 1048576], y : ℝ[9223372036854775807 - 9223372036854775806]) -> ℝ[] = sum(x) + sum(y)
)");
  EXPECT_EQ(e->errors().size(), 4u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 1, 28, "ℝ[n: 1000000000000, m: 1000000000000] has more than 2^40 elements"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 2, 10, "ℝ[1048576, 1048577] has more than 2^40 elements")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 3, 37, "ℝ[1048576, v: 1048577] has more than 2^40 elements")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 8, 3,
                           "`stack{1048576}(L{1048576})` gives parameter `w` the type ℝ[1048576, 1048576, 1048576]"))
      << e->rendered();
}

TEST(ElaborateErrors, ConstantsOfTheWrongKind) {
  auto e = elaborate_text(R"(const A : nat = 2.5
const B : nat = -1
const C : nat = 1 / 0
const D : f64 = 1e308 * 10.0
fn f(x : ℝ[A]) -> ℝ[] = sum(x)
fn g(x : ℝ[7 / 2]) -> ℝ[] = sum(x)
)");
  EXPECT_TRUE(e->has_error("E0401", 1, 17, "`A` is declared nat but its value 2.5 is not an integer")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 2, 17, "`B` is declared nat but its value -1 is negative")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0701", 3, 17, "division by zero in a constant")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0701", 4, 17, "the constant overflows")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 6, 12, "7 is not a multiple of 2")) << e->rendered();
}

TEST(ElaborateErrors, IntegerArgumentsMustBeExactIntegers) {
  auto e = elaborate_text(R"(fn g(x : ℝ[], n : nat) -> ℝ[] = x * real(n)
fn a(x : ℝ[]) -> ℝ[] = g(x, 2 ^ -1)
fn b(x : ℝ[]) -> ℝ[] = g(x, 10 ^ 30)
fn c(x : ℝ[]) -> ℝ[] = g(x, 9223372036854775807 + 1)
fn d(x : ℝ[]) -> ℝ[] = g(x, -3)
fn e(x : ℝ[]) -> ℝ[] = g(x, 1.5)
fn f(x : ℝ[a: 6]) -> ℝ[a: 3] = slice(axis a, x, 2 ^ -1, 3)
fn ok(x : ℝ[]) -> ℝ[] = g(x, 2 ^ 3) + g(x, 9007199254740992)
)");
  EXPECT_EQ(e->errors().size(), 6u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 2, 29, "argument `n` of `g` is nat, but 0.5 is not an integer")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 3, 29, "is outside ±2^53")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 4, 29, "is outside ±2^53")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 5, 29, "argument `n` of `g` is nat, but -3 is negative")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 29, "argument `n` of `g` is nat, but 1.5 is not an integer")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 7, 49, "a slice's bounds are natural-number constants")) << e->rendered();
}

TEST(ElaborateErrors, RecursiveModules) {
  auto self = elaborate_text("module A {\n  use a : A\n}\n");
  EXPECT_ONE_ERROR(self, "E0501", 2, 3, "module `A` contains itself through `a`");
  auto pair = elaborate_text("module A {\n  use b : B\n}\nmodule B {\n  use a : stack{2}(A)\n}\n");
  EXPECT_ONE_ERROR(pair, "E0501", 5, 3, "module `A` contains itself through `a`");
  // Flattening the cut tree stays finite.
  ParamsType a{0, {}, {}};
  EXPECT_TRUE(pair->prog->flatten(a).empty());
}

TEST(ElaborateErrors, TreesOfSharedSubModulesAreBounded) {
  // M0 uses M1 twice, M1 uses M2 twice, …: 2^n parameter tensors from n lines.
  auto doubling = [](int levels) {
    std::string text;
    for (int i = 0; i < levels; ++i)
      text += fmt::format("module M{} {{\n  use a : M{}\n  use b : M{}\n}}\n", i, i + 1, i + 1);
    return text + fmt::format("module M{} {{\n  param w : ℝ[2]\n}}\n", levels);
  };
  auto ok = elaborate_text(doubling(19));  // 2^19 tensors: allowed
  EXPECT_TRUE(ok->ok()) << ok->rendered();
  auto big = elaborate_text(doubling(45));  // reported once, and quickly
  EXPECT_EQ(big->errors(),
            std::vector<std::string>{"main.qr:99:3 E0501 module `M24` would hold more than 1048576 parameter tensors"});
}

TEST(ElaborateErrors, RecursiveFunctions) {
  auto self = elaborate_text("fn f(x : ℝ[]) -> ℝ[] = f(x) + 1.0\n");
  EXPECT_ONE_ERROR(self, "E0502", 1, 24, "`f` calls `f`, which leads back to it: recursion is not allowed");
  auto mutual =
      elaborate_text("fn f(x : ℝ[]) -> ℝ[] = g(x)\nfn g(x : ℝ[]) -> ℝ[] = h(x)\nfn h(x : ℝ[]) -> ℝ[] = f(x)\n");
  EXPECT_ONE_ERROR(mutual, "E0502", 3, 24, "`h` calls `f`, which leads back to it");
  auto methods = elaborate_text(R"(module M {
  param w : ℝ[2]
  fn a(x : ℝ[2]) -> ℝ[2] = b(x) * w
  fn b(x : ℝ[2]) -> ℝ[2] = a(x)
}
)");
  EXPECT_ONE_ERROR(methods, "E0502", 4, 28, "`M.b` calls `M.a`, which leads back to it");
}

TEST(ElaborateErrors, ImportCyclesAndMissingImports) {
  auto cycle = elaborate_files(
      {{"main.qr", "import \"a.qr\" as a\n"}, {"a.qr", "import \"b.qr\" as b\n"}, {"b.qr", "import \"a.qr\" as a\n"}});
  // Reported in a.qr, where the cycle starts.
  EXPECT_EQ(cycle->errors(), std::vector<std::string>{"a.qr:1:1 E0302 import cycle: a.qr → b.qr → a.qr"});
  auto self = elaborate_files({{"main.qr", "import \"main.qr\" as me\n"}});
  EXPECT_ONE_ERROR(self, "E0302", 1, 1, "import cycle: main.qr → main.qr");
  auto missing = elaborate_files({{"main.qr", "\nimport \"nothere.qr\" as n\nfn f() -> ℝ[] = 0.0\n"}});
  EXPECT_ONE_ERROR(missing, "E0301", 2, 1, "cannot read `nothere.qr`: no such file");
  EXPECT_EQ(missing->hint_of("E0301"), "imports are relative to the importing file (main.qr)");
  auto main_missing = elaborate_files({}, "absent.qr");
  ASSERT_EQ(main_missing->sink.all().size(), 1u);
  EXPECT_EQ(main_missing->sink.all()[0].code, "E0301");
  EXPECT_FALSE(main_missing->sink.all()[0].has_location);
  EXPECT_EQ(main_missing->rendered(), "absent.qr: error[E0301]: cannot read the program: no such file\n");
}

TEST(ElaborateErrors, DuplicateDefinitions) {
  auto e = elaborate_text(R"(dim B
const B : nat = 3
fn f(x : ℝ[]) -> ℝ[] = x
fn f(x : ℝ[]) -> ℝ[] = x
module M{D D : dim} {
  param w : ℝ[D]
  param w : ℝ[D]
  fn g(x : ℝ[], x : ℝ[]) -> ℝ[] = x
}
)");
  EXPECT_EQ(e->errors().size(), 5u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 2, 7, "`B` is already defined in this file")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 4, 4, "`f` is already defined in this file")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 5, 12, "dimension `D` is declared twice")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 7, 9, "`w` is already a member of module `M`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 8, 17, "argument `x` is named twice")) << e->rendered();
  // An alias imported twice. Import errors stop elaboration before the
  // declarations (what follows would echo them).
  auto imports = elaborate_files({{"main.qr", "import \"k.qr\" as k\nimport \"k.qr\" as k\nfn f() -> ℝ[] = y\n"},
                                  {"k.qr", "const K : nat = 1\n"}});
  EXPECT_EQ(imports->errors(), std::vector<std::string>{"main.qr:2:18 E0304 `k` is imported twice"});
}

TEST(ElaborateErrors, AFoldMustMapXToX) {
  auto e = elaborate_text(R"(module B {
  param w : ℝ[m: 4]
  fn shrink(x : ℝ[m: 4]) -> ℝ[m: 2] = slice(axis m, x * w, 0, 2)
  fn two(x : ℝ[m: 4], s : ℝ[]) -> ℝ[m: 4] = x * s
  fn three(x : ℝ[m: 4], s : f64, keep : bool[m: 4], k : key) -> ℝ[m: 4] =
    where(keep, x * real(s), x) + sum(normal(k, u: 1))
}
module T {
  use bs : stack{3}(B)
  fn a(x : ℝ[m: 4]) -> ℝ[m: 2] = bs.shrink(x)
  fn b(x : ℝ[m: 4]) -> ℝ[m: 4] = bs.two(x, 1.0)
  fn c(x : ℝ[m: 4]) -> ℝ[m: 4] = bs.w
  fn d(x : ℝ[m: 4], keep : bool[m: 4], k : key) -> ℝ[m: 4] = bs.three(x, 1.0, keep, k)
}
)");
  EXPECT_EQ(e->errors().size(), 3u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0503", 10, 34, "calling `B.shrink` on a stack folds it over the copies")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0503", 11, 34,
                           "argument `s` of `B.two` is ℝ[]: a stack passes every copy only keys, booleans, integers and "
                           "host scalars besides x"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 12, 34, "has no function `w`")) << e->rendered();
}

TEST(ElaborateErrors, TrainingRuns) {
  auto e = elaborate_text(R"(dim B
const K : nat = 4
module M {
  param w : ℝ[4]
}
module P{D : dim} {
  param w : ℝ[D]
}
fn loss(θ : params M, batch : ℝ[batch: B, 4]) -> ℝ[] = mean(batch * θ.w)
fn two(θ : params M, x : ℝ[4], y : ℝ[4]) -> ℝ[] = sum(x * y * θ.w)
optimizer adamw {
  lr : f64 = 0.01
}
training run {
  model = Nope
  objective = lozz
  optimizer = adam
  data = stream "d.npz" |> batch(K = 8) |> shuffle(rate = 2)
  epochs : nat = 0
  checkpoint every 0 steps to "ck/"
}
)");
  EXPECT_TRUE(e->has_error("E0303", 15, 11, "no module named `Nope`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 16, 15, "no function named `lozz` in this file")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 17, 15, "no optimizer named `adam`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0601", 18, 34, "`batch(K = …)` binds a dimension, but `K` is not a `dim` of this file"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0601", 18, 52, "shuffle takes `seed = N`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0601", 19, 18, "`epochs` is a positive natural number")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0601", 20, 3, "checkpoint every N: N ≥ 1")) << e->rendered();

  auto m = elaborate_text(R"(dim B
module P{D : dim} {
  param w : ℝ[D]
}
module M {
  param w : ℝ[4]
}
fn two(θ : params M, x : ℝ[4], y : ℝ[4]) -> ℝ[] = sum(x * y * θ.w)
fn other(x : ℝ[4], θ : params M) -> ℝ[] = sum(x * θ.w)
optimizer sgd {
  lr : f64 = 0.1
}
training run {
  model = P
  objective = two
  optimizer = sgd
  data = batch(B = 0)
}
training run {
  model = M
  objective = other
  optimizer = sgd
  data = stream "d.npz" |> batch(B = 2)
}
)");
  EXPECT_TRUE(m->has_error("E0601", 14, 11, "the model `P` has dimensions")) << m->rendered();
  EXPECT_TRUE(m->has_error("E0601", 17, 16, "a batch holds at least one sample")) << m->rendered();
  EXPECT_TRUE(m->has_error("E0601", 17, 10, "data starts with `stream \"file.npy\"`")) << m->rendered();
  EXPECT_TRUE(m->has_error("E0601", 19, 1, "a file has at most one `training run`")) << m->rendered();

  auto missing = elaborate_text("module M {\n  param w : ℝ[4]\n}\ntraining run {\n  model = M\n}\n");
  EXPECT_TRUE(missing->has_error("E0601", 4, 1, "the training run names no `objective`")) << missing->rendered();
  EXPECT_TRUE(missing->has_error("E0601", 4, 1, "the training run names no `optimizer`")) << missing->rendered();
  EXPECT_TRUE(missing->has_error("E0601", 4, 1, "the training run has no `data")) << missing->rendered();

  auto args = elaborate_text(R"(dim B
module M {
  param w : ℝ[4]
}
fn two(θ : params M, x : ℝ[batch: B, 4], y : ℝ[batch: B, 4]) -> ℝ[] = sum(x * y * θ.w)
optimizer sgd {
  lr : f64 = 0.1
}
training run {
  model = M
  objective = two
  optimizer = sgd
  data = stream "d.npz" |> batch(B = 2)
}
)");
  EXPECT_ONE_ERROR(args, "E0601", 5, 4, "the objective `two` takes the parameters, one batch and optionally a key");

  // A third argument is the step's key, and nothing else.
  auto keyed = elaborate_text(R"(dim B
module M {
  param w : ℝ[4]
}
fn keyed(θ : params M, x : ℝ[batch: B, 4], k : key) -> ℝ[] = sum(where(bernoulli(k, 0.5, batch: B, c: 4), x, 0.0) * θ.w)
optimizer sgd {
  lr : f64 = 0.1
}
training run {
  model = M
  objective = keyed
  optimizer = sgd
  data = stream "d.npz" |> batch(B = 2)
}
)");
  EXPECT_TRUE(keyed->ok()) << keyed->rendered();
}

TEST(ElaborateErrors, ParameterDeclarations) {
  auto e = elaborate_text(R"(module M {
  param a : ℝ[...,4]
  param b : i32[4]
  param c : ℝ[4]  init = glorot
  param d : ℝ[4]  init = uniform(2, 1)
  param f : ℝ[4]  init = normal(-1)
  param g : ℝ[4]  init = zeros(1)
  param h : ℝ[4]  init = uniform(3)
  param i : (ℝ[4], ℝ[4])
}
)");
  EXPECT_EQ(e->errors().size(), 8u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 2, 13, "a parameter must be a real tensor of known axes")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 3, 13, "a parameter must be a real tensor of known axes")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 4, 26, "unknown initializer `glorot`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 5, 26, "uniform(a, b) needs a ≤ b")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 26, "normal(std) needs std ≥ 0")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 7, 26, "`zeros` takes at most 0 argument(s)")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 8, 26, "uniform(a, b) needs both bounds")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 9, 13, "a parameter must be a real tensor")) << e->rendered();
}

TEST(ElaborateErrors, PickMistakes) {
  auto e = elaborate_text(R"(fn a(x : ℝ[b: 2, v: 5], i : ℝ[b: 2]) -> ℝ[] = sum(pick(axis v, x, i))
fn b(x : ℝ[b: 2, v: 5], i : i32[b: 3]) -> ℝ[] = sum(pick(axis v, x, i))
fn c(x : ℝ[b: 2, v: 5], i : i32[v: 5]) -> ℝ[] = sum(pick(axis v, x, i))
fn d(x : ℝ[b: 2, v: 5], i : i32[b: 2]) -> ℝ[] = sum(pick(x, i))
fn e(x : ℝ[b: 2, v: 5], i : i32[b: 2]) -> ℝ[] = sum(pick(axis w, x, i))
fn f(x : ℝ[..., v: 5], i : i32[b: 2]) -> ℝ[] = sum(pick(axis v, x, i))
)");
  EXPECT_EQ(e->errors().size(), 6u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 1, 67, "pick's ids are integers, given ℝ[b: 2]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 2, 69, "pick's ids must have the axes of x without `v`, i32[b: 2]; given i32[b: 3]"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 3, 69, "pick's ids must have the axes of x without `v`, i32[b: 2]; given i32[v: 5]"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 4, 53, "`pick(axis n, x, ids)` names the axis it picks along")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 5, 63, "pick: ℝ[b: 2, v: 5] has no axis named `w`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 68, "pick's ids must have the axes of x without `v`, i32[...]; given i32[b: 2]"))
      << e->rendered();
}

TEST(ElaborateErrors, ScanMistakes) {
  auto e =
      elaborate_text(R"(fn a(a : ℝ[t: 4, n: 3, m: 3], x : ℝ[t: 4, n: 3]) -> ℝ[t: 4, n: 3] = scan(axis t, axis n, a, x)
fn b(a : ℝ[t: 4, n: 3, m: 2], x : ℝ[t: 4, n: 3]) -> ℝ[t: 4, n: 3] = scan(axis t, axis n, axis m, a, x)
fn c(a : ℝ[t: 4, m: 3, n: 3], x : ℝ[t: 5, n: 3]) -> ℝ[t: 5, n: 3] = scan(axis t, axis n, axis m, a, x)
fn d(a : ℝ[t: 4, n: 3, m: 3], x : ℝ[t: 4, n: 3]) -> ℝ[t: 4, n: 3] = scan(axis t, axis t, axis m, a, x)
fn e(a : i32[t: 4, n: 3, m: 3], x : ℝ[t: 4, n: 3]) -> ℝ[t: 4, n: 3] = scan(axis t, axis n, axis m, a, x)
fn f(a : ℝ[t: 4, n: 3, m: 3], x : ℝ[t: 4, n: 3]) -> ℝ[t: 4, n: 3] = scan(axis s, axis n, axis m, a, x)
)");
  EXPECT_EQ(e->errors().size(), 6u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 1, 69,
                           "`scan(axis t, axis n, axis m, a, x)` names the step axis and the state axis of x, and the "
                           "axis of a it sums over"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 2, 90, "scan: a's `m` has size 2, but the state axis `n` has size 3"))
      << e->rendered();
  EXPECT_TRUE(e->has_error(
      "E0401", 3, 98, "scan's a must have the axes of x and `m`; without `m` it is ℝ[t: 4, n: 3], x is ℝ[t: 5, n: 3]"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 4, 82, "scan: the state axis `t` is the step axis")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 5, 100, "scan takes real tensors, given i32[t: 4, n: 3, m: 3]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 6, 79, "scan: ℝ[t: 4, n: 3] has no axis named `s`")) << e->rendered();
}

TEST(ElaborateErrors, RestructuringMistakes) {
  auto e = elaborate_text(R"(dim B
fn a(x : ℝ[a: 6]) -> ℝ[] = sum(split(axis a, x, p: 4, q: 2))
fn b(x : ℝ[p: 2, q: 3]) -> ℝ[] = sum(merge(axis p, axis q, x, r: 5))
fn c(x : ℝ[a: 2, b: 3], y : ℝ[a: 2, b: 4]) -> ℝ[] = sum(concat(axis a, x, y))
fn d(x : ℝ[a: 6]) -> ℝ[] = sum(slice(axis a, x, 4, 8))
fn e(x : ℝ[a: 6]) -> ℝ[] = sum(slice(axis a, x, 0, 4, 0))
fn f(t : ℝ[v: 5, 2], i : ℝ[3]) -> ℝ[] = sum(gather(axis v, t, i))
fn g(i : i32[3]) -> ℝ[] = sum(one_hot(i, v: 0))
fn h(i : ℝ[3]) -> ℝ[] = sum(one_hot(i, v: 4))
fn k(x : ℝ[a: 6, p: 2]) -> ℝ[] = sum(split(axis a, x, p: 2, q: 3))
fn m(k : ℝ[3]) -> ℝ[] = sum(uniform(k, n: 3))
fn n(k : key) -> ℝ[] = sum(uniform(k, n: 3, low = 2.0, high = 1.0))
fn o(k : key) -> ℝ[] = sum(bernoulli(k, n: 3))
)");
  EXPECT_EQ(e->errors().size(), 12u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 2, 32, "split: the parts multiply to 8, but axis `a` has size 6")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 3, 63, "merge: the axes multiply to 6, but the result is declared 5"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 4, 75, "concat: ℝ[a: 2, b: 4] does not match ℝ[a: 2, b: 3] except along `a`"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 5, 32, "slice [4, 8) of axis `a` (size 6) is empty or out of range"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 6, 55, "a slice's step is a positive integer")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 7, 63, "gather's ids are integers, given ℝ[3]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0404", 8, 42, "an axis must have a positive size")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 9, 37, "one_hot takes integer ids")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 10, 38, "the result would have two axes named `p`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 11, 37, "`uniform` draws from a random key (type `key`) first")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 12, 28, "uniform needs low < high")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 13, 28, "`bernoulli` takes 2 value argument(s), given 1")) << e->rendered();
}

TEST(ElaborateErrors, ErrorsInSeveralFunctionsAreAllReported) {
  auto e = elaborate_text(R"(fn a(x : ℝ[3]) -> ℝ[3] = y
fn b(x : ℝ[3]) -> ℝ[4] = x
fn c(x : ℝ[3]) -> ℝ[3] = x · x
fn d(x : ℝ[3]) -> ℝ[3] = a(x) + b(x)
)");
  // d calls b, whose declared result ℝ[4] broadcasts against a's ℝ[3]: one more.
  EXPECT_EQ(e->errors().size(), 4u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0303", 1, 26, "unknown name `y`"));
  EXPECT_TRUE(e->has_error("E0401", 2, 26, "the function's result should be ℝ[4]"));
  // ℝ[3] · ℝ[3] is the dot product, a scalar.
  EXPECT_TRUE(e->has_error("E0401", 3, 26, "the function's result should be ℝ[3], but is ℝ[]")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0402", 4, 26, "cannot broadcast ℝ[3] with ℝ[4]")) << e->rendered();
}

TEST(ElaborateErrors, GenericFunctions) {
  auto e = elaborate_text(R"(dim B
const K : nat = 2
fn pair{N}(x : ℝ[n: N], y : ℝ[N]) -> ℝ[n: N] = x + y
fn a(u : ℝ[3], v : ℝ[4]) -> ℝ[3] = pair(u, v)
fn b(u : ℝ[B, 3]) -> ℝ[3] = pair(u, u)
fn c(u : ℝ[3]) -> ℝ[3] = pair(2.0, u)
fn unbound{N M}(x : ℝ[N], y : ℝ[2 * M]) -> ℝ[N] = x
fn twice{N N}(x : ℝ[N]) -> ℝ[N] = x
fn hides{B K}(x : ℝ[B, K]) -> ℝ[] = sum(x)
fn value{N}(x : ℝ[N]) -> ℝ[N] = x * N
)");
  EXPECT_EQ(e->errors().size(), 8u) << e->rendered();
  // A later use of a size parameter must agree with the axis that bound it:
  // the message names both sizes and where the binding came from.
  EXPECT_TRUE(e->has_error("E0401", 4, 44,
                           "argument `y` of `pair` should be ℝ[3], but is ℝ[4]: axis 0 has size 4, but `N` is 3 "
                           "(bound by argument `x`, axis 0)"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 5, 34, "argument `x` of `pair`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 6, 31, "argument `x` of `pair`")) << e->rendered();
  // `2 * M` is a size of M, but not M itself: no call could infer M.
  EXPECT_TRUE(e->has_error("E0407", 7, 14, "size parameter `M` of `unbound` is not the size of any argument's axis"))
      << e->rendered();
  EXPECT_EQ(e->hint_of("E0407"), "give an argument an axis of exactly that size, e.g. `x : ℝ[..., n: M]`");
  EXPECT_TRUE(e->has_error("E0304", 8, 12, "size parameter `N` is declared twice")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 9, 10, "`B` is already a dimension of this file")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0304", 9, 12, "`K` is already a constant of this file")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 10, 37, "`N` is a size parameter, not a value")) << e->rendered();
}

TEST(ElaborateErrors, HostileInputEndsInDiagnostics) {
  // Deep nesting, huge sizes and nonsense never crash elaboration.
  std::string deep = "fn f(x : ℝ[]) -> ℝ[] = " + std::string(150, '(') + "x" + std::string(150, ')') + "\n";
  EXPECT_TRUE(elaborate_text(deep)->ok());
  std::string deeper = "fn f(x : ℝ[]) -> ℝ[] = ";
  for (int i = 0; i < 150; ++i) deeper += "exp(";
  deeper += "x" + std::string(150, ')') + "\n";
  auto d = elaborate_text(deeper);
  EXPECT_TRUE(d->ok() || d->has_error("E0202", 1, 1, "", "main.qr") || !d->errors().empty());
  // A flat chain is not nesting, but its tree is as deep as it is long: it may
  // have syntax::kMaxExprHeight levels (4999 `+` and the leaves), no more.
  std::string chain = "fn f(x : ℝ[3]) -> ℝ[3] = x";
  for (size_t i = 0; i + 1 < syntax::kMaxExprHeight; ++i) chain += " + x";
  auto flat = elaborate_text(chain + "\n");
  EXPECT_TRUE(flat->ok()) << flat->errors().at(0);
  EXPECT_EQ(flat->fn("f").body.size(), syntax::kMaxExprHeight - 1);  // one `add` per `+`
  auto past = elaborate_text(chain + " + x\n");
  EXPECT_ONE_ERROR(past, "E0202", 1, 26, "expression too deep: its tree has 5001 levels");
  auto big = elaborate_text("fn f(x : ℝ[9223372036854775807 * 2]) -> ℝ[] = sum(x)\n");
  EXPECT_ONE_ERROR(big, "E0404", 1, 12, "the size overflows 64 bits");
  auto garbage = elaborate_text("module { } fn ( -> = \n training run { model = 3 }\n");
  EXPECT_FALSE(garbage->ok());
  for (int n = 0; n < 60; ++n) {
    std::string many;
    for (int i = 0; i <= n; ++i) many += "fn f" + std::to_string(i) + "(x : ℝ[]) -> ℝ[] = y\n";
    auto m = elaborate_text(many);
    EXPECT_EQ(m->errors().size(), std::min<size_t>(n + 1, 50));
  }
}

TEST(ElaborateErrors, TheHeldOutEvaluationNamesAFunctionOfTheObjectivesShape) {
  auto make = [](const std::string& line) {
    return elaborate_text(R"(dim B
module M {
  param w : ℝ[4]
}
fn loss(θ : params M, x : ℝ[batch: B, 4]) -> ℝ[] = sum(x * θ.w)
fn other(θ : params M, x : ℝ[batch: B, 4]) -> ℝ[4] = sum(axis batch, x * θ.w)
optimizer sgd {
  lr : f64 = 0.1
}
training run {
  model = M
  objective = loss
  optimizer = sgd
  data = stream "d.npy" |> batch(B = 2)
)" + line + "\n}\n");
  };
  EXPECT_TRUE(make("  evaluate loss every 10 steps on \"v.npy\"")->ok());
  EXPECT_ONE_ERROR(make("  evaluate lozz every 10 steps on \"v.npy\""), "E0303", 15, 12,
                   "no function named `lozz` in this file");
  EXPECT_ONE_ERROR(make("  evaluate other every 10 steps on \"v.npy\""), "E0601", 15, 12,
                   "`other` is evaluated on held-out batches: it takes the objective `loss`'s arguments and returns ℝ[]");
  EXPECT_ONE_ERROR(make("  evaluate loss every 0 steps on \"v.npy\""), "E0601", 15, 3, "evaluate … every N steps: N ≥ 1");
  EXPECT_ONE_ERROR(make("  evaluate loss every 2 epochs on \"v.npy\""), "E0601", 15, 3, "evaluate … every N steps");
}

TEST(ElaborateErrors, RenameNamesAnAxisItHasAndANameItLacks) {
  auto e = elaborate_text(R"(fn bad1(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2, b: 3] = rename(x, a → b)
fn bad2(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2, b: 3] = rename(x, z → b)
fn bad3(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2, b: 3] = rename(x)
fn bad4(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2, b: 3] = exp(x, a → b)
fn good(x : ℝ[a: 2, b: 3]) -> ℝ[c: 2, b: 3] = rename(x, a → c)
)");
  EXPECT_EQ(e->errors().size(), 4u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 1, 57, "the result would have two axes named `b`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 2, 57, "rename: ℝ[a: 2, b: 3] has no axis named `z`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 3, 47, "give at least one `old → new`")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 4, 54, "`exp` takes no `old → new` argument")) << e->rendered();
}

TEST(ElaborateErrors, ArgmaxTakesOneNamedAxisOfANumberTensor) {
  auto e = elaborate_text(R"(fn a(x : bool[b: 2, v: 3]) -> i32[b: 2] = argmax(axis v, x)
fn b(x : ℝ[b: 2, v: 3]) -> i32[] = argmax(x)
fn c(x : ℝ[b: 2, v: 3]) -> i32[b: 2] = argmin(axis w, x)
fn d(x : ℝ[b: 2, v: 3]) -> i32[b: 2] = argmax(axis v, x)
)");
  EXPECT_EQ(e->errors().size(), 3u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0406", 1, 43, "`argmax` takes a real or integer tensor, given bool[b: 2, v: 3]"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 2, 36, "`argmax(axis a, x)` finds a position along one named axis")) << e->rendered();
  EXPECT_TRUE(e->has_error("E0403", 3, 52, "argmin: ℝ[b: 2, v: 3] has no axis named `w`")) << e->rendered();
}

TEST(ElaborateErrors, AContractionThatBatchesASharedAxisWarnsUnlessTheProgramSaysSo) {
  auto e = elaborate_text(R"(fn slip(q : ℝ[t: 4, d: 3], k : ℝ[t: 4, d: 3]) -> ℝ[t: 4] = contract(axis d, q, k)
fn meant(q : ℝ[h: 2, t: 4, d: 3], k : ℝ[h: 2, s: 4, d: 3]) -> ℝ[h: 2, t: 4, s: 4] = contract(axis d, q, k, batch = h)
fn both(q : ℝ[h: 2, t: 4, d: 3], k : ℝ[h: 2, t: 4, d: 3]) -> ℝ[h: 2, t: 4] = contract(axis d, q, k, batch = (h, t))
fn half(q : ℝ[h: 2, t: 4, d: 3], k : ℝ[h: 2, t: 4, d: 3]) -> ℝ[h: 2, t: 4] = contract(axis d, q, k, batch = h)
fn lead(q : ℝ[..., t: 4, d: 3], k : ℝ[..., s: 4, d: 3]) -> ℝ[..., t: 4, s: 4] = contract(axis d, q, k)
fn wrong(q : ℝ[h: 2, t: 4, d: 3], k : ℝ[h: 2, s: 4, d: 3]) -> ℝ[h: 2, t: 4, s: 4] = contract(axis d, q, k, batch = (h, z))
)");
  EXPECT_EQ(e->errors().size(), 1u) << e->rendered();
  EXPECT_TRUE(e->has_error("E0405", 6, 120, "`batch = z`: the operands do not share an axis of that name")) << e->rendered();
  size_t warnings = 0;
  for (const Diagnostic& d : e->sink.all()) warnings += d.severity == Severity::Warning;
  EXPECT_EQ(warnings, 2u) << e->rendered();  // slip's t and half's t; `...` batches silently
  EXPECT_TRUE(e->has_error("W0402", 1, 60, "contract batches axis `t`, which both operands have")) << e->rendered();
  EXPECT_TRUE(e->has_error("W0402", 4, 78, "contract batches axis `t`")) << e->rendered();
  EXPECT_EQ(e->hint_of("W0402"),
            "to pair every `t` with every other, rename one (`rename(…, t → s)`); if batching is meant, say `batch = t`");
}

TEST(ElaborateErrors, AGradientOfAFunctionWhoseCalleeFailedReportsTheCalleesError) {
  // The callee's error, not an internal one from differentiating a function without a body.
  auto e = elaborate_text(R"(fn f(x : ℝ[..., m: 8], k : key) -> ℝ[..., m: 8] =
  let drop = bernoulli(k, 0.75, b: 3, m: 8)
  where(drop, x / 0.75, 0.0)
fn loss(x : ℝ[b: 3, m: 8], k : key) -> ℝ[] = sum(f(x, k))
fn g(x : ℝ[b: 3, m: 8], k : key) -> ℝ[b: 3, m: 8] = grad(loss)(x, k)
)");
  EXPECT_ONE_ERROR(e, "E0401", 2, 3, "the function's result should be ℝ[..., m: 8], but is ℝ[..., b: 3, m: 8]");
}

}  // namespace
}  // namespace quire::elab
