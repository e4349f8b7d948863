#pragma once
// The parser's state, shared by parser.cpp (lines, recovery, items and
// declarations) and parser_expr.cpp (expressions, blocks, types, patterns,
// module references). Not part of the interface: include parser.h.
//
// Error discipline (Wren's "panic mode"): the first error of a line is
// reported and sets `panicking_`; further errors are dropped until the parser
// resynchronizes at the start of a line (an item, a member, a block line, a
// field), so one mistake yields one diagnostic and the next line is read fresh.

#include <string>
#include <string_view>
#include <vector>

#include "quire/syntax/parser.h"

namespace quire::syntax::detail {

/// Drops the NEWLINE tokens that do not end a line (docs/grammar.md, "Lines")
/// and collapses runs of newlines into one, so the parser sees exactly one
/// NEWLINE between two lines and none inside a bracketed or continued line.
std::vector<Token> significant_lines(std::vector<Token> tokens);

/// Recursive descent over the significant tokens of one file.
class Parser {
 public:
  /// `quiet_lines` (sorted): lines where the lexer reported an error; parse errors there are dropped.
  Parser(const SourceManager& sources, FileId file, DiagnosticSink& sink, std::vector<Token> tokens,
         std::vector<uint32_t> quiet_lines);

  ast::File parse_file();

 private:
  /// Counts one level of nesting for its lifetime; past kMaxNesting the level
  /// is refused (ok() false), E0202 is reported once per file and the rest of
  /// the bracketed group is skipped, so the caller returns a placeholder.
  class Nesting {
   public:
    explicit Nesting(Parser& parser) : parser_(parser), ok_(parser.enter_nesting()) {}
    ~Nesting() { --parser_.depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    bool ok() const { return ok_; }

   private:
    Parser& parser_;
    bool ok_;
  };

  // ---------------------------------------------------------------- cursor (parser.cpp)

  /// The token `ahead` places on; End past the end.
  const Token& peek(size_t ahead = 0) const;
  bool at(TokenKind kind, size_t ahead = 0) const { return peek(ahead).kind == kind; }
  /// Whether the token is the contextual identifier `word` (`axis`, `high`, `run`, ...).
  bool at_word(std::string_view word, size_t ahead = 0) const;
  const Token& advance();
  bool accept(TokenKind kind);
  /// The last token consumed (the first token when none was).
  const Token& previous() const;
  /// From `start` to the end of the last token consumed.
  SourceRange range_from(SourceRange start) const;
  /// Whether the current token ends a line: NEWLINE, End or `}`.
  bool at_line_end() const;

  // ---------------------------------------------------------------- errors (parser.cpp)

  void error(const char* code, SourceRange range, std::string message, std::string hint = "");
  /// E0201 at the current token: "expected WHAT, found TOKEN".
  void error_expected(std::string_view what, std::string hint = "");
  /// Consumes a `kind` token, or reports E0201 and consumes nothing.
  bool expect(TokenKind kind, std::string_view context = "");
  /// Consumes the closer of `opener`, or reports "expected `)` to close the `(` opened at L:C".
  bool expect_closing(TokenKind closer, const Token& opener);
  /// Consumes an identifier (canonical text), or reports E0201 and returns an empty Ident at the current token.
  ast::Ident expect_ident(std::string_view what);
  /// Consumes the contextual word, or reports E0201.
  bool expect_word(std::string_view word, std::string_view context);
  /// "identifier `x`", "`)`", "end of line", ... as written in the source.
  std::string describe(const Token& token) const;
  /// "3:14".
  std::string position(SourceRange range) const;
  /// A line starts here: errors are reported again.
  void synchronize() { panicking_ = false; }

  // ---------------------------------------------------------------- recovery (parser.cpp)

  bool enter_nesting();
  /// Skips to the end of the bracketed group the parser is in (after E0202).
  void skip_nested_group();
  /// Skips to the NEWLINE (not consumed) or the `}` (not consumed) that ends this line.
  void skip_to_line_end();
  /// Skips at least one token, then to the next line that starts a top-level item.
  void skip_to_item();
  /// Skips at least one token, then to the next `param`/`use`/`fn` line or the module's `}`.
  void skip_to_member();
  /// After a declaration or line: requires its end (NEWLINE, End, `}`), else reports and skips.
  void finish_line(std::string_view what);

  // ---------------------------------------------------------------- items (parser.cpp)
  //
  // One function per production of docs/grammar.md, named after it. Each
  // starts at the production's first token, returns what it read (placeholders
  // where it could not, never null where ast.h requires a node) and leaves the
  // cursor after the last token it consumed.

  /// An item at the current line, appended to `file` (with its place in `order`).

  void parse_item(ast::File& file);
  ast::ImportDecl parse_import();
  ast::DimDecl parse_dim();
  ast::ConstDecl parse_const();
  ast::ModuleDecl parse_module();
  void parse_member(ast::ModuleDecl& module);
  ast::ParamDecl parse_param();
  ast::UseDecl parse_use();
  /// Fills `fn`; false when its header could not be read (then its body lines must be skipped).
  bool parse_fn(ast::FnDecl& fn);
  ast::FnArg parse_fn_arg();
  ast::OptimizerDecl parse_optimizer();
  ast::TrainingDecl parse_training();
  void parse_training_item(ast::TrainingDecl& training);
  ast::Field parse_field();
  ast::PipelineStage parse_stage();
  ast::CheckpointClause parse_checkpoint();
  ast::EvaluateClause parse_evaluate();
  /// Whether an `=` follows on this line outside brackets (tells `key : T = e` from `key : e`).
  bool assign_ahead_on_line() const;
  /// Parses `{ { NEWLINE | line } }` after `open`, calling `line` at the start
  /// of each line; `fn_lines` when a `fn` line belongs inside (a module).
  template <typename Line>
  void parse_braced_lines(const Token& open, std::string_view what, bool fn_lines, Line line);

  // ---------------------------------------------------------------- expressions (parser_expr.cpp)

  /// `expr`, one nesting level.
  ast::ExprPtr parse_expr();
  ast::ExprPtr parse_compare();
  ast::ExprPtr parse_cast();
  ast::ExprPtr parse_additive();
  ast::ExprPtr parse_multiplicative();
  ast::ExprPtr parse_unary();
  ast::ExprPtr parse_power();
  ast::ExprPtr parse_postfix();
  ast::ExprPtr parse_primary();
  ast::ExprPtr parse_paren();
  ast::ExprPtr parse_marked_block(ast::ExprKind kind);
  ast::ExprPtr parse_braced_block();
  /// `{ NEWLINE } { let NEWLINE { NEWLINE } } expr` as a Block (a fn body, or inside `{ }`).
  ast::ExprPtr parse_body();
  ast::Let parse_let();
  std::vector<ast::Arg> parse_args(const Token& open);
  ast::Arg parse_arg();
  /// An empty Name at the current token: what an unreadable expression leaves.
  ast::ExprPtr placeholder_expr();
  /// lhs op rhs, ranging from lhs to the last token consumed.
  ast::ExprPtr binary(ast::BinaryOp op, ast::ExprPtr lhs, ast::ExprPtr rhs);

  // ---------------------------------------------------------------- types, patterns, modules (parser_expr.cpp)

  ast::TypePtr parse_type();
  ast::TypePtr parse_tensor_type();
  ast::AxisExpr parse_axis();
  /// `nat`, `int`, `f64` or `bool` (for `const`), or a placeholder after E0201.
  ast::TypePtr parse_scalar_type();
  /// A Tensor type without elem at the current token: what an unreadable type leaves.
  ast::TypePtr placeholder_type();
  ast::PatternPtr parse_pattern();
  ast::ModuleRef parse_modref();
  std::vector<ast::Ident> parse_qualname(std::string_view what);

  const SourceManager& sources_;
  FileId file_;
  DiagnosticSink& sink_;
  std::vector<Token> tokens_;
  std::vector<uint32_t> quiet_lines_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool depth_reported_ = false;
  bool panicking_ = false;
};

/// Whether the token begins a top-level item.
bool starts_item(TokenKind kind);
/// Whether the token begins a declaration line of any kind (an item, a member, a `let`).
bool starts_declaration(TokenKind kind);

}  // namespace quire::syntax::detail
