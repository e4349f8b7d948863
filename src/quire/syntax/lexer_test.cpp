#include "quire/syntax/lexer.h"

#include <gtest/gtest.h>

#include <random>

#include "quire/syntax/syntax_testing.h"

namespace quire::syntax {
namespace {

struct Lexed {
  SourceManager sources;
  DiagnosticSink sink;
  std::vector<Token> tokens;
  std::string rendered() const { return sink.render(sources); }
};

std::unique_ptr<Lexed> lex_text(const std::string& text) {
  auto l = std::make_unique<Lexed>();
  FileId id = l->sources.add("t.qr", text);
  l->tokens = lex(l->sources, id, l->sink);
  return l;
}

/// "KIND text" for each token but the final END.
std::vector<std::string> kinds_and_texts(const std::string& text) {
  auto l = lex_text(text);
  std::vector<std::string> out;
  for (const Token& t : l->tokens)
    if (t.kind != TokenKind::End) out.push_back(std::string(token_kind_name(t.kind)) + " " + t.text);
  EXPECT_FALSE(l->sink.has_errors()) << l->rendered();
  return out;
}

TEST(Lexer, UnicodeAndAsciiTwinsLexIdentically) {
  const std::pair<const char*, const char*> twins[] = {
      {"·", "@"}, {"≤", "<="}, {"≥", ">="}, {"≠", "!="}, {"→", "->"}, {"…", "..."},
      {"θ", "theta"}, {"γ", "gamma"}, {"Γ", "Gamma"}, {"ω", "omega"}, {"α", "alpha"}, {"λ", "lambda"},
  };
  for (auto [unicode, ascii] : twins) {
    std::string u = std::string("x ") + unicode + " y";
    std::string a = std::string("x ") + ascii + " y";
    EXPECT_EQ(kinds_and_texts(u), kinds_and_texts(a)) << unicode << " vs " << ascii;
  }
  EXPECT_EQ(kinds_and_texts("x @ w"), (std::vector<std::string>{"IDENT x", "DOT ·", "IDENT w"}));
  EXPECT_EQ(kinds_and_texts("theta"), (std::vector<std::string>{"IDENT θ"}));
}

TEST(Lexer, OnlyWholeGreekNamesAreLetters) {
  EXPECT_EQ(kinds_and_texts("theta1 thetas _theta THETA eps"),
            (std::vector<std::string>{"IDENT theta1", "IDENT thetas", "IDENT _theta", "IDENT THETA", "IDENT eps"}));
  EXPECT_EQ(kinds_and_texts("θ_1 xγ"), (std::vector<std::string>{"IDENT θ_1", "IDENT xγ"}));
}

TEST(Lexer, RealIsAnIdentifierTheParserReadsInTypes) {
  // The lexer does not turn `R` into `ℝ`: `R` may be an ordinary name.
  EXPECT_EQ(kinds_and_texts("ℝ[D] R[D] R"),
            (std::vector<std::string>{"IDENT ℝ", "LBRACKET [", "IDENT D", "RBRACKET ]", "IDENT R", "LBRACKET [",
                                      "IDENT D", "RBRACKET ]", "IDENT R"}));
}

TEST(Lexer, KeywordsAndContextualWords) {
  EXPECT_EQ(kinds_and_texts("import as dim const module param use fn let init numerics precision frozen"),
            (std::vector<std::string>{"IMPORT import", "AS as", "DIM dim", "CONST const", "MODULE module",
                                      "PARAM param", "USE use", "FN fn", "LET let", "INIT init",
                                      "NUMERICS numerics", "PRECISION precision", "FROZEN frozen"}));
  EXPECT_EQ(kinds_and_texts("stack params optimizer training true false"),
            (std::vector<std::string>{"STACK stack", "PARAMS params", "OPTIMIZER optimizer", "TRAINING training",
                                      "TRUE true", "FALSE false"}));
  for (const char* word : {"axis", "key", "nat", "int", "f64", "bool", "i32", "high", "run", "stream", "to"})
    EXPECT_EQ(kinds_and_texts(word), (std::vector<std::string>{std::string("IDENT ") + word}));
}

TEST(Lexer, Numbers) {
  auto l = lex_text("4 50 0.01 1e-6 1.5E3 2e+3 9223372036854775807");
  ASSERT_FALSE(l->sink.has_errors()) << l->rendered();
  ASSERT_EQ(l->tokens.size(), 8u);
  EXPECT_EQ(l->tokens[0].kind, TokenKind::Int);
  EXPECT_EQ(l->tokens[0].integer, 4);
  EXPECT_EQ(l->tokens[1].integer, 50);
  EXPECT_EQ(l->tokens[2].kind, TokenKind::Float);
  EXPECT_DOUBLE_EQ(l->tokens[2].number, 0.01);
  EXPECT_EQ(l->tokens[3].text, "1e-6");
  EXPECT_DOUBLE_EQ(l->tokens[3].number, 1e-6);
  EXPECT_DOUBLE_EQ(l->tokens[4].number, 1500.0);
  EXPECT_DOUBLE_EQ(l->tokens[5].number, 2000.0);
  EXPECT_EQ(l->tokens[6].integer, INT64_MAX);
  // Not numbers' parts: `2e` without digits, `1.` without digits, `.5`.
  EXPECT_EQ(kinds_and_texts("2e 1.x .5"),
            (std::vector<std::string>{"INT 2", "IDENT e", "INT 1", "PERIOD .", "IDENT x", "PERIOD .", "INT 5"}));
  // After `.` digits are a tuple index: `pair.0.1` is two indices.
  EXPECT_EQ(kinds_and_texts("pair.0.1"),
            (std::vector<std::string>{"IDENT pair", "PERIOD .", "INT 0", "PERIOD .", "INT 1"}));
  // Underflow is not an error.
  EXPECT_DOUBLE_EQ(lex_text("1e-400")->tokens[0].number, 0.0);
}

TEST(Lexer, Strings) {
  auto l = lex_text(R"("data/pairs.qr.d" "a\"b\\c\nd\te" "γ")");
  ASSERT_FALSE(l->sink.has_errors()) << l->rendered();
  EXPECT_EQ(l->tokens[0].text, "data/pairs.qr.d");
  EXPECT_EQ(l->tokens[0].range.length, 17u);
  EXPECT_EQ(l->tokens[1].text, "a\"b\\c\nd\te");
  EXPECT_EQ(l->tokens[2].text, "γ");
}

TEST(Lexer, CommentsAndNewlines) {
  EXPECT_EQ(kinds_and_texts("a -- comment · ∀ \xff\n\n  b--c\n-- only\nx-y->z"),
            (std::vector<std::string>{"IDENT a", "NEWLINE ", "NEWLINE ", "IDENT b", "NEWLINE ", "NEWLINE ",
                                      "IDENT x", "MINUS -", "IDENT y", "ARROW →", "IDENT z"}));
  EXPECT_EQ(kinds_and_texts("a\r\nb\tc"), (std::vector<std::string>{"IDENT a", "NEWLINE ", "IDENT b", "IDENT c"}));
}

TEST(Lexer, DumpsOneTokenPerLine) {
  auto l = lex_text("let θ = \"s\\n\" · 2\n");
  EXPECT_EQ(dump_tokens(l->sources, l->tokens),
            "1:1 LET let\n"
            "1:5 IDENT θ\n"
            "1:7 ASSIGN =\n"
            "1:9 STRING \"s\\n\"\n"
            "1:15 DOT ·\n"
            "1:17 INT 2\n"
            "1:18 NEWLINE\n"
            "2:1 END\n");
}

TEST(Lexer, UnexpectedCharacterIsReportedAndSkipped) {
  auto l = lex_text("const D : nat = 4;\nx é y\n");
  EXPECT_EQ(l->rendered(),
            "t.qr:1:18: error[E0101]: unexpected character `;` (U+003B)\n"
            "    1 | const D : nat = 4;\n"
            "      |                  ^\n"
            "      = hint: lines end at a line break; quire has no `;`\n"
            "t.qr:2:3: error[E0101]: unexpected character `é` (U+00E9)\n"
            "    2 | x é y\n"
            "      |   ^\n"
            "      = hint: identifiers use ASCII letters, digits, `_` and Greek letters\n");
  // Lexing went on: `4`, then `x` and `y` on line 2.
  EXPECT_EQ(l->tokens[5].text, "4");
  EXPECT_EQ(l->tokens[7].text, "x");
  EXPECT_EQ(l->tokens[8].text, "y");
}

TEST(Lexer, InvalidUtf8RunIsOneError) {
  auto l = lex_text("a \xff\xfe\xc0\x80 b \x01 c");
  ASSERT_EQ(l->sink.all().size(), 2u) << l->rendered();
  EXPECT_EQ(l->sink.all()[0].message, "invalid UTF-8 byte 0xFF (and 3 more bytes that start no token)");
  EXPECT_EQ(l->sink.all()[0].range.begin.offset, 2u);
  EXPECT_EQ(l->sink.all()[0].range.length, 4u);
  EXPECT_EQ(l->sink.all()[1].message, "unexpected control character U+0001");
  EXPECT_EQ(l->sink.all()[1].code, "E0101");
  EXPECT_EQ(l->tokens.size(), 4u);  // a b c END
}

TEST(Lexer, LiteralsOutOfRange) {
  auto l = lex_text("x = 99999999999999999999 + 1e999\n");
  EXPECT_EQ(l->rendered(),
            "t.qr:1:5: error[E0102]: integer `99999999999999999999` does not fit in 64 bits\n"
            "    1 | x = 99999999999999999999 + 1e999\n"
            "      |     ^^^^^^^^^^^^^^^^^^^^\n"
            "      = hint: the largest integer is 9223372036854775807; write a float (`1e20`) for a larger number\n"
            "t.qr:1:28: error[E0102]: number `1e999` is too large for a 64-bit float\n"
            "    1 | x = 99999999999999999999 + 1e999\n"
            "      |                            ^^^^^\n"
            "      = hint: the largest finite f64 is about 1.8e308\n");
  EXPECT_EQ(l->tokens[2].integer, 0);
  EXPECT_EQ(l->tokens[4].number, 0.0);
  // One past INT64_MAX.
  EXPECT_EQ(lex_text("9223372036854775808")->sink.all().at(0).code, "E0102");
}

TEST(Lexer, UnterminatedStringAndUnknownEscape) {
  auto l = lex_text("import \"a.qr as t\nx \"b\\qc\"\n");
  EXPECT_EQ(l->rendered(),
            "t.qr:1:8: error[E0103]: unterminated string\n"
            "    1 | import \"a.qr as t\n"
            "      |        ^^^^^^^^^^\n"
            "      = hint: close the string with `\"` before the end of the line\n"
            "t.qr:2:5: error[E0104]: unknown escape `\\q` in a string\n"
            "    2 | x \"b\\qc\"\n"
            "      |     ^^\n"
            "      = hint: the escapes are `\\\"`, `\\\\`, `\\n` and `\\t`\n");
  EXPECT_EQ(l->tokens[1].text, "a.qr as t");
  EXPECT_EQ(l->tokens[2].kind, TokenKind::Newline);  // the line break still ends the line
  EXPECT_EQ(l->tokens[4].text, "bqc");
  // Unterminated at the end of the file.
  EXPECT_EQ(lex_text("\"abc")->sink.all().at(0).code, "E0103");
}

TEST(Lexer, RandomBytesGiveBoundedErrors) {
  std::mt19937 rng(20240601);
  for (int round = 0; round < 20; ++round) {
    std::string bytes(10000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    auto l = lex_text(bytes);
    EXPECT_TRUE(l->sink.has_errors());
    EXPECT_LE(l->sink.error_count(), 50u);
    EXPECT_EQ(l->tokens.back().kind, TokenKind::End);
  }
}

}  // namespace
}  // namespace quire::syntax
