#pragma once
// The parser: tokens to the syntax tree of ast.h, by recursive descent over the
// grammar of docs/grammar.md (which it implements production by production).
//
// It never throws on user input and never crashes: errors (E0201–E0205) go to
// the sink, the parser resynchronizes at the next line it can read (an item at
// top level; a `param`/`use`/`fn`/`}` in a module; the next line in a block)
// and goes on, so one run reports several errors. Nesting deeper than
// kMaxNesting is reported once (E0202) and skipped, so the C++ stack stays
// bounded whatever the input; an expression whose tree is deeper than
// kMaxExprHeight (a long chain of operators) is reported (E0202) and replaced,
// so later stages' walks stay bounded too. It returns whatever it could read.

#include <vector>

#include "quire/support/diagnostics.h"
#include "quire/support/source.h"
#include "quire/syntax/ast.h"
#include "quire/syntax/token.h"

namespace quire::syntax {

/// How deeply expressions, types, patterns and module references may nest,
/// counted together. 200 is far beyond any model (a tower's deepest
/// expression is ~10) and keeps the descent under ~1 MB of stack.
inline constexpr int kMaxNesting = 200;

/// How many levels one expression's tree may have, a chain of operators counting
/// one per operator (`a + b + c` is `(a + b) + c`): every later stage walks the
/// tree recursively, so this bounds their stacks as kMaxNesting bounds the
/// parser's. 5000 is far beyond any model and leaves room under an 8 MB stack
/// in the sanitizer builds, whose frames are the largest.
inline constexpr size_t kMaxExprHeight = 5000;

/// Lexes and parses one file.
ast::File parse_file(const SourceManager& sources, FileId file, DiagnosticSink& sink);

/// Parses tokens already lexed from `file` (they must end with End).
ast::File parse_tokens(const SourceManager& sources, FileId file, std::vector<Token> tokens,
                       DiagnosticSink& sink);

}  // namespace quire::syntax
