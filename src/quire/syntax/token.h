#pragma once
// Tokens of a .qr file. One table (QUIRE_TOKEN_KINDS) lists every kind with the
// name `quire dump --stage tokens` prints and, for fixed tokens, the canonical
// spelling: where a token has a Unicode and an ASCII spelling (`≤`/`<=`,
// `·`/`@`), both lex to one kind and the token's text is the Unicode one.
//
// Keywords are reserved words (docs/grammar.md lists them); every other word
// the grammar mentions (`axis`, `high`, `run`, `to`, ...) is an identifier that
// the parser reads by position.

#include <cstdint>
#include <string>
#include <string_view>

#include "quire/support/source.h"

namespace quire::syntax {

// X(Kind, DUMP_NAME, canonical spelling or "" for tokens whose text varies)
#define QUIRE_TOKEN_KINDS(X)         \
  X(End, "END", "")                  \
  X(Newline, "NEWLINE", "")          \
  X(Ident, "IDENT", "")              \
  X(Int, "INT", "")                  \
  X(Float, "FLOAT", "")              \
  X(String, "STRING", "")            \
  X(LParen, "LPAREN", "(")           \
  X(RParen, "RPAREN", ")")           \
  X(LBracket, "LBRACKET", "[")       \
  X(RBracket, "RBRACKET", "]")       \
  X(LBrace, "LBRACE", "{")           \
  X(RBrace, "RBRACE", "}")           \
  X(Comma, "COMMA", ",")             \
  X(Colon, "COLON", ":")             \
  X(Period, "PERIOD", ".")           \
  X(Ellipsis, "ELLIPSIS", "…")       \
  X(Assign, "ASSIGN", "=")           \
  X(Plus, "PLUS", "+")               \
  X(Minus, "MINUS", "-")             \
  X(Star, "STAR", "*")               \
  X(Slash, "SLASH", "/")             \
  X(Caret, "CARET", "^")             \
  X(Dot, "DOT", "·")                 \
  X(Lt, "LT", "<")                   \
  X(Le, "LE", "≤")                   \
  X(Gt, "GT", ">")                   \
  X(Ge, "GE", "≥")                   \
  X(EqEq, "EQEQ", "==")              \
  X(Ne, "NE", "≠")                   \
  X(Arrow, "ARROW", "→")             \
  X(Pipe, "PIPE", "|>")              \
  X(KwImport, "IMPORT", "import")    \
  X(KwAs, "AS", "as")                \
  X(KwDim, "DIM", "dim")             \
  X(KwConst, "CONST", "const")       \
  X(KwModule, "MODULE", "module")    \
  X(KwParam, "PARAM", "param")       \
  X(KwUse, "USE", "use")             \
  X(KwFn, "FN", "fn")                \
  X(KwLet, "LET", "let")             \
  X(KwInit, "INIT", "init")          \
  X(KwNumerics, "NUMERICS", "numerics") \
  X(KwPrecision, "PRECISION", "precision") \
  X(KwFrozen, "FROZEN", "frozen")    \
  X(KwStack, "STACK", "stack")       \
  X(KwParams, "PARAMS", "params")    \
  X(KwOptimizer, "OPTIMIZER", "optimizer") \
  X(KwTraining, "TRAINING", "training") \
  X(KwTrue, "TRUE", "true")          \
  X(KwFalse, "FALSE", "false")

/// The kinds of token, in the order of QUIRE_TOKEN_KINDS (keywords last, KwImport…KwFalse).
enum class TokenKind : uint8_t {
#define QUIRE_TOKEN_ENUM(kind, name, spelling) kind,
  QUIRE_TOKEN_KINDS(QUIRE_TOKEN_ENUM)
#undef QUIRE_TOKEN_ENUM
};

/// One token. `text` is the canonical spelling: a keyword or operator's
/// Unicode form, an identifier with a Greek letter's ASCII name replaced by the
/// letter (`theta` → `θ`), a number as written, a string's decoded contents.
struct Token {
  TokenKind kind = TokenKind::End;
  SourceRange range;
  std::string text;
  int64_t integer = 0;  ///< Int: the value (0 after an E0102 overflow)
  double number = 0;    ///< Int and Float: the value (0 after an E0102 overflow)
};

/// The upper-case name a token dump prints: "IDENT", "LPAREN", "LET".
const char* token_kind_name(TokenKind kind);

/// The canonical spelling of a fixed token (`≤`, `let`); "" for Ident, Int, ...
const char* token_kind_spelling(TokenKind kind);

/// The keyword spelled `word`, or Ident when `word` is not reserved.
TokenKind keyword_kind(std::string_view word);

/// True for the reserved words.
bool is_keyword(TokenKind kind);

}  // namespace quire::syntax
