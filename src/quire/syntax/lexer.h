#pragma once
// The lexer: UTF-8 source text to tokens (token.h). It reports E0101 (an
// unexpected character or invalid UTF-8), E0102 (a number literal out of
// range), E0103 (an unterminated string) and E0104 (an unknown escape), skips
// the offending text and goes on, so it always returns a token list ending in
// End. It emits a NEWLINE for every line break; which of them end a line is
// the parser's decision (docs/grammar.md, "Lines").

#include <string>
#include <vector>

#include "quire/support/diagnostics.h"
#include "quire/support/source.h"
#include "quire/syntax/token.h"

namespace quire::syntax {

/// Every token of one file, the last one End (at the end of the text).
std::vector<Token> lex(const SourceManager& sources, FileId file, DiagnosticSink& sink);

/// One token a line, `line:col KIND text`, for `quire dump --stage tokens`;
/// strings are printed quoted with their escapes, NEWLINE and END without text.
std::string dump_tokens(const SourceManager& sources, const std::vector<Token>& tokens);

}  // namespace quire::syntax
