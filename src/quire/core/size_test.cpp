// Symbolic sizes (size.h): canonical forms, substitution, exact and opaque
// division, evaluation and overflow.

#include "quire/core/size.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace quire::elab {
namespace {

Size C(int64_t v) { return Size::constant(v); }
Size S(const std::string& name) { return Size::symbol(name); }

Size add(const Size& a, const Size& b) {
  bool ok = true;
  Size r = Size::add(a, b, ok);
  EXPECT_TRUE(ok);
  return r;
}
Size sub(const Size& a, const Size& b) {
  bool ok = true;
  Size r = Size::sub(a, b, ok);
  EXPECT_TRUE(ok);
  return r;
}
Size mul(const Size& a, const Size& b) {
  bool ok = true;
  Size r = Size::mul(a, b, ok);
  EXPECT_TRUE(ok);
  return r;
}
Size div(const Size& a, const Size& b) {
  bool ok = true;
  Size r = Size::div(a, b, ok);
  EXPECT_TRUE(ok);
  return r;
}

TEST(Size, ConstantsAndSymbols) {
  EXPECT_EQ(C(4).constant_value(), 4);
  EXPECT_EQ(C(0).constant_value(), 0);
  EXPECT_EQ(Size().constant_value(), 0);
  EXPECT_FALSE(S("B").is_constant());
  EXPECT_EQ(C(4).str(), "4");
  EXPECT_EQ(C(-3).str(), "-3");
  EXPECT_EQ(S("B").str(), "B");
  EXPECT_EQ(C(0), Size());
  EXPECT_FALSE(S("B") == S("D"));
}

TEST(Size, CanonicalFormsCompareEqual) {
  // 2·D == D + D, D·H == H·D, (D + 1) − 1 == D, D − D == 0.
  EXPECT_EQ(mul(C(2), S("D")), add(S("D"), S("D")));
  EXPECT_EQ(mul(S("D"), S("H")), mul(S("H"), S("D")));
  EXPECT_EQ(sub(add(S("D"), C(1)), C(1)), S("D"));
  EXPECT_EQ(sub(S("D"), S("D")), C(0));
  EXPECT_EQ(sub(S("D"), S("D")).constant_value(), 0);
  // (D + 1)·(D − 1) == D·D − 1
  EXPECT_EQ(mul(add(S("D"), C(1)), sub(S("D"), C(1))), sub(mul(S("D"), S("D")), C(1)));
  EXPECT_EQ(add(mul(C(2), S("D")), C(1)).str(), "2·D + 1");
  EXPECT_EQ(sub(C(1), S("D")).str(), "-D + 1");
  EXPECT_EQ(mul(S("D"), S("H")).str(), "D·H");
  EXPECT_EQ(add(C(3), C(4)), C(7));
  EXPECT_EQ(mul(C(3), C(4)), C(12));
}

TEST(Size, ExactDivisionByAConstant) {
  EXPECT_EQ(div(mul(C(4), S("D")), C(2)), mul(C(2), S("D")));
  EXPECT_EQ(div(add(mul(C(6), S("D")), C(3)), C(3)), add(mul(C(2), S("D")), C(1)));
  EXPECT_EQ(div(C(12), C(4)), C(3));
  EXPECT_EQ(div(S("D"), C(1)), S("D"));
  EXPECT_EQ(div(C(0), S("D")), C(0));
}

TEST(Size, OpaqueDivisionIsEqualOnlyToItself) {
  Size dh = div(S("D"), S("H"));
  EXPECT_EQ(dh.str(), "D / H");
  EXPECT_FALSE(dh.is_constant());
  EXPECT_EQ(dh, div(S("D"), S("H")));
  EXPECT_FALSE(dh == div(S("H"), S("D")));
  EXPECT_FALSE(dh == S("D"));
  // (D + 1) / 2 does not divide term by term: opaque.
  Size half = div(add(S("D"), C(1)), C(2));
  EXPECT_EQ(half.str(), "(D + 1) / 2");
  EXPECT_EQ(div(S("D"), mul(S("H"), S("K"))).str(), "D / (H·K)");
  EXPECT_FALSE(half == div(S("D"), C(2)));
  // A constant that does not divide stays a quotient too (the elaborator
  // rejects `7 / 2` in a type before it gets here).
  Size seven_halves = div(C(7), C(2));
  EXPECT_FALSE(seven_halves.is_constant());
  EXPECT_EQ(seven_halves.str(), "7 / 2");
  // Arithmetic keeps the quotient as an atom: 2·(D / H) == D / H + D / H.
  EXPECT_EQ(mul(C(2), dh), add(dh, dh));
  EXPECT_EQ(mul(C(2), dh).str(), "2·D / H");
}

TEST(Size, AQuotientTimesItsDenominatorCancels) {
  Size dh = div(S("D"), S("H"));
  EXPECT_EQ(mul(dh, S("H")), S("D"));
  EXPECT_EQ(mul(S("H"), dh), S("D"));
  EXPECT_EQ(mul(mul(C(3), dh), mul(S("H"), S("K"))), mul(C(3), mul(S("D"), S("K"))));
  EXPECT_EQ(mul(div(add(S("D"), C(1)), C(2)), C(2)), add(S("D"), C(1)));
  EXPECT_EQ(mul(div(add(S("D"), C(1)), C(2)), C(6)), add(mul(C(3), S("D")), C(3)));
  // Part of the denominator is not enough.
  Size dhk = div(S("D"), mul(S("H"), S("K")));
  EXPECT_FALSE(mul(dhk, S("H")) == div(S("D"), S("K")));
  EXPECT_EQ(mul(mul(dhk, S("H")), S("K")), S("D"));
  EXPECT_EQ(mul(dh, C(2)).str(), "2·D / H");
  // A sum of quotients: (D / H + 1)·H = D + H.
  EXPECT_EQ(mul(add(dh, C(1)), S("H")), add(S("D"), S("H")));
  // Nested: ((D / H) / K)·K·H = D.
  EXPECT_EQ(mul(mul(div(dh, S("K")), S("K")), S("H")), S("D"));
}

TEST(Size, DivisionByZeroIsReported) {
  bool ok = true;
  Size::div(C(4), C(0), ok);
  EXPECT_FALSE(ok);
  ok = true;
  Size::div(S("D"), C(0), ok);
  EXPECT_FALSE(ok);
}

TEST(Size, Substitution) {
  bool ok = true;
  Size s = add(mul(C(2), S("D")), S("B"));  // 2·D + B
  Size r = s.substitute({{"D", C(3)}}, ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(r, add(S("B"), C(6)));
  EXPECT_EQ(r.str(), "B + 6");
  // Symbols map to sizes with symbols: D → In·Out.
  EXPECT_EQ(S("D").substitute({{"D", mul(S("In"), S("Out"))}}, ok), mul(S("Out"), S("In")));
  // Simultaneous, not sequential: D → H, H → D swaps.
  EXPECT_EQ(sub(S("D"), S("H")).substitute({{"D", S("H")}, {"H", S("D")}}, ok), sub(S("H"), S("D")));
  // Unbound symbols stay.
  EXPECT_EQ(S("Q").substitute({{"D", C(3)}}, ok), S("Q"));
  EXPECT_TRUE(ok);
}

TEST(Size, SubstitutionDividesQuotientsAgain) {
  bool ok = true;
  Size dh = div(S("D"), S("H"));
  EXPECT_EQ(dh.substitute({{"D", C(8)}, {"H", C(2)}}, ok), C(4));
  // Partly bound: (2·K) / 2 = K once D = 2·K.
  EXPECT_EQ(dh.substitute({{"D", mul(C(2), S("K"))}, {"H", C(2)}}, ok), S("K"));
  // Within arithmetic: 3·(D / H) + 1 at D = 12, H = 4 is 10.
  Size e = add(mul(C(3), dh), C(1));
  EXPECT_EQ(e.substitute({{"D", C(12)}, {"H", C(4)}}, ok), C(10));
  // A quotient that still does not divide stays opaque.
  Size odd = dh.substitute({{"D", C(7)}, {"H", C(2)}}, ok);
  EXPECT_FALSE(odd.is_constant());
  EXPECT_EQ(odd.str(), "7 / 2");
  EXPECT_TRUE(ok);
}

TEST(Size, Evaluate) {
  Size s = add(mul(S("B"), S("D")), C(1));
  EXPECT_EQ(s.evaluate({{"B", 4}, {"D", 3}}), 13);
  EXPECT_EQ(s.evaluate({{"B", 4}}), std::nullopt);
  EXPECT_EQ(C(5).evaluate({}), 5);
  Size dh = div(S("D"), S("H"));
  EXPECT_EQ(dh.evaluate({{"D", 8}, {"H", 2}}), 4);
  EXPECT_EQ(dh.evaluate({{"D", 7}, {"H", 2}}), std::nullopt);  // not a whole number
  EXPECT_EQ(dh.evaluate({{"D", 8}}), std::nullopt);
}

TEST(Size, SymbolsIncludeThoseInsideQuotients) {
  Size s = add(mul(S("B"), S("D")), div(S("D"), S("H")));
  std::vector<std::string> syms = s.symbols();
  std::sort(syms.begin(), syms.end());
  EXPECT_EQ(syms, (std::vector<std::string>{"B", "D", "H"}));
  EXPECT_TRUE(C(3).symbols().empty());
}

TEST(Size, OverflowIsReported) {
  bool ok = true;
  Size::add(C(INT64_MAX), C(1), ok);
  EXPECT_FALSE(ok);
  ok = true;
  Size::mul(C(INT64_MAX / 2 + 1), C(2), ok);
  EXPECT_FALSE(ok);
  ok = true;
  Size::sub(C(0), C(INT64_MIN), ok);
  EXPECT_FALSE(ok);
  ok = true;
  Size::mul(mul(C(int64_t{1} << 40), S("D")), C(int64_t{1} << 40), ok);
  EXPECT_FALSE(ok);
  ok = true;
  Size::div(C(INT64_MIN), C(-1), ok);
  EXPECT_FALSE(ok);
  ok = true;
  C(int64_t{1} << 40).substitute({}, ok);
  S("D").substitute({{"D", mul(C(int64_t{1} << 62), C(1))}}, ok);
  EXPECT_TRUE(ok);
  mul(C(4), S("D")).substitute({{"D", C(int64_t{1} << 62)}}, ok);
  EXPECT_FALSE(ok);
  // Evaluation overflow is "no value", not a wrong one.
  EXPECT_EQ(mul(S("A"), S("B")).evaluate({{"A", int64_t{1} << 40}, {"B", int64_t{1} << 40}}), std::nullopt);
  EXPECT_EQ(C(INT64_MIN).str(), "-9223372036854775808");
}

}  // namespace
}  // namespace quire::elab
