#pragma once
// Helpers shared by the syntax stage's unit tests (lexer_test.cpp,
// parser_test.cpp, parser_errors_test.cpp, ast_printer_test.cpp).

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "quire/support/diagnostics.h"
#include "quire/syntax/ast_printer.h"
#include "quire/syntax/lexer.h"
#include "quire/syntax/parser.h"

namespace quire::syntax::testing {

/// One source text parsed, with everything a test asserts on.
struct Parsed {
  SourceManager sources;
  DiagnosticSink sink;
  FileId id = 0;
  ast::File file;

  /// Each error as "line:col Ecode", in report order.
  std::vector<std::string> errors() const {
    std::vector<std::string> out;
    for (const Diagnostic& d : sink.all()) {
      LineCol lc = sources.line_col(d.range.begin);
      out.push_back(fmt::format("{}:{} {}", lc.line, lc.column, d.code));
    }
    return out;
  }
  std::string rendered() const { return sink.render(sources); }
  std::string printed() const { return print_ast(file); }
  /// The source text a range covers.
  std::string text(SourceRange range) const {
    return sources.file(id).text.substr(range.begin.offset, range.length);
  }
};

inline std::unique_ptr<Parsed> parse(const std::string& text, const std::string& path = "t.qr") {
  auto p = std::make_unique<Parsed>();
  p->id = p->sources.add(path, text);
  p->file = parse_file(p->sources, p->id, p->sink);
  return p;
}

/// The first function's final expression, printed: for precedence tests.
inline std::string final_expr(const std::string& expr) {
  auto p = parse("fn f(x : ℝ[]) -> ℝ[] =\n  " + expr + "\n");
  if (p->sink.has_errors() || p->file.fns.empty()) return "error: " + p->rendered();
  return print_expr(*p->file.fns[0].body->children[0]);
}

}  // namespace quire::syntax::testing
