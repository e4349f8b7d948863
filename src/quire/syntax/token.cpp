#include "quire/syntax/token.h"

namespace quire::syntax {

const char* token_kind_name(TokenKind kind) {
  switch (kind) {
#define QUIRE_TOKEN_NAME(k, name, spelling) \
  case TokenKind::k: return name;
    QUIRE_TOKEN_KINDS(QUIRE_TOKEN_NAME)
#undef QUIRE_TOKEN_NAME
  }
  return "?";
}

const char* token_kind_spelling(TokenKind kind) {
  switch (kind) {
#define QUIRE_TOKEN_SPELLING(k, name, spelling) \
  case TokenKind::k: return spelling;
    QUIRE_TOKEN_KINDS(QUIRE_TOKEN_SPELLING)
#undef QUIRE_TOKEN_SPELLING
  }
  return "";
}

bool is_keyword(TokenKind kind) { return kind >= TokenKind::KwImport && kind <= TokenKind::KwFalse; }

TokenKind keyword_kind(std::string_view word) {
  // Every keyword is 2 to 9 lowercase ASCII letters: most identifiers fail fast.
  if (word.size() < 2 || word.size() > 9 || word[0] < 'a' || word[0] > 'z') return TokenKind::Ident;
  for (int k = static_cast<int>(TokenKind::KwImport); k <= static_cast<int>(TokenKind::KwFalse); ++k) {
    auto kind = static_cast<TokenKind>(k);
    if (word == token_kind_spelling(kind)) return kind;
  }
  return TokenKind::Ident;
}

}  // namespace quire::syntax
